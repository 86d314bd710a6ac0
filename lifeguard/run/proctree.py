"""What /proc says about processes: their parent, session, state and start, their children, their
environment's run marker, their signal handlers. Run membership (lifeguard.run.membership) is built on it.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass

from lifeguard.child.protocol import RUN_ID_ENV as RUN_MARKER_ENV

PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    pgrp: int
    state: str
    comm: str
    start: int = 0  # start time in clock ticks after boot: orders processes (pids are reused)


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once (prctl for the subreaper and the parent-death signal)."""
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make orphans of our children re-parent to us instead of init (Linux only)."""
    try:
        return bool(libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def read_proc(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # comm may hold spaces and parentheses: split at the last ')'.
    head, _, rest = data.rpartition(")")
    fields = rest.split()
    comm = head.partition("(")[2]
    return ProcInfo(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), pgrp=int(fields[2]), state=fields[0],
                    comm=comm,
                    start=int(fields[19]) if len(fields) > 19 else 0)


def all_processes() -> dict[int, ProcInfo]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = read_proc(int(entry))
            if info is not None:
                found[info.pid] = info
    return found


def has_marker(pid: int, run_id: str) -> bool:
    needle = f"{RUN_MARKER_ENV}={run_id}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def signal_caught(pid: int, signum: int) -> bool:
    """Does process ``pid`` have a handler for ``signum``? (Signalling one that
    does not would kill it before its native stacks are captured.)"""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    except OSError:
        pass
    return False


def children_of(pid: int) -> list[int]:
    """Children of ``pid`` (zombies too), from /proc/PID/task/*/children, or from a scan of every process
    where the kernel lacks that file."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # a thread that ended between the two looks (not a kernel without the file)
            return [info.pid for info in all_processes().values() if info.ppid == pid]
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    """Does ``pid`` exist, and is it no zombie?"""
    info = read_proc(pid)
    return info is not None and info.state != "Z"
