"""Find and kill every process that belongs to a run, orphans included.

A run's tree is found three ways, because each alone misses something:
- descendants by parent pid (the plain case);
- the run's session id (children that are re-parented but stay in the session);
- an environment marker inherited through fork and exec (a grandchild that
  double-forks and calls ``setsid`` escapes both; the supervisor is a child
  subreaper, so it is re-parented to us, and the marker says which run it came from).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass

from lifeguard.child.protocol import RUN_ID_ENV as RUN_MARKER_ENV

PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 5
REAP_TIMEOUT = 2.0


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    state: str
    comm: str
    start: int = 0  # start time in clock ticks after boot: orders processes (pids are reused)


def become_subreaper() -> bool:
    """Make orphans of our children re-parent to us instead of init (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
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
    return ProcInfo(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), state=fields[0], comm=comm,
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


def run_tree(root: int, run_id: str, *, include_root: bool = True) -> list[int]:
    """Live (non-zombie) pids of the run rooted at ``root``, root first."""
    procs = all_processes()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for info in procs.values():
        children.setdefault(info.ppid, []).append(info.pid)
    members: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in members:
            continue
        members.add(pid)
        stack.extend(children.get(pid, ()))
    for info in procs.values():
        if info.pid in members or info.pid == me:
            continue
        if info.sid == root or (info.ppid == me and has_marker(info.pid, run_id)):
            members.add(info.pid)
            stack = [info.pid]
            while stack:  # their descendants too
                pid = stack.pop()
                for kid in children.get(pid, ()):
                    if kid not in members:
                        members.add(kid)
                        stack.append(kid)
    live = [p for p in members if p in procs and procs[p].state != "Z"]
    if not include_root:
        live = [p for p in live if p != root]
    return sorted(live, key=lambda p: (p != root, p))


def kill_tree(root: int, run_id: str) -> list[int]:
    """SIGKILL every process of the run until none is left; return the pids killed.

    Several rounds, because a process may fork between the scan and the kill.
    """
    killed: list[int] = []
    for _ in range(KILL_ROUNDS):
        pids = run_tree(root, run_id)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        try:
            os.killpg(root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        time.sleep(0.01)
    return sorted(set(killed))


def reap_orphans(pids: list[int], timeout: float = REAP_TIMEOUT) -> None:
    """Collect the exit status of re-parented orphans so no zombie stays behind.

    Only the given pids: a blanket waitpid(-1) would steal the status of a
    parallel run's child from its Popen.
    """
    deadline = time.monotonic() + timeout
    pending = [p for p in pids]
    while pending and time.monotonic() < deadline:
        still = []
        for pid in pending:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # not our child (or already reaped): its parent reaps it
            if done == 0:
                still.append(pid)
        pending = still
        if pending:
            time.sleep(0.005)


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


def _children(pid: int) -> list[int] | None:
    """Children of ``pid`` from /proc/PID/task/*/children; None where the kernel lacks the file."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    seen_file = False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
            seen_file = True
        except FileNotFoundError:
            continue
        except OSError:
            seen_file = True
    return found if seen_file else None


def leftovers_after_exit(root: int, run_id: str) -> list[int]:
    """Live processes of a run whose main process has exited.

    They are all orphans re-parented to us (we are the subreaper) and their
    descendants, so walking our own children is enough: no scan of every
    process on the machine, which each passing run would pay for. Falls back
    to the full scan where the kernel has no /proc/PID/task/TID/children.
    """
    ours = _children(os.getpid())
    if ours is None:
        return run_tree(root, run_id, include_root=False)
    members = []
    for pid in ours:
        info = read_proc(pid)
        if pid != root and info is not None and (info.sid == root or has_marker(pid, run_id)):
            members.append(pid)
    stack = list(members)
    while stack:
        kids = _children(stack.pop()) or []
        for kid in kids:
            if kid not in members:
                members.append(kid)
                stack.append(kid)
    return sorted(p for p in members if _alive(p))


def _alive(pid: int) -> bool:
    info = read_proc(pid)
    return info is not None and info.state != "Z"
