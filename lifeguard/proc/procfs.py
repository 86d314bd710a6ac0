"""What /proc says about a process: its parent, session, group, state and start, its children, its executable
and command line, its environment's markers, its signal handlers, its threads' names, the libpython it maps.

The one reader of /proc/PID/stat (``stat_fields``) for the supervisor, the discovery's end and the capture;
what cannot be read (the process is gone, or not ours to read) is None or empty, never an error.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from lifeguard.child.protocol import RUN_ID_ENV as RUN_MARKER_ENV

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the thread that made it ends
STOPPED_STATES = ("T", "t")
ZOMBIE_STATES = ("Z", "X")
# A shared libpython's file name: "libpython3.11.so.1.0", "libpython3.13t.so".
LIBPYTHON = re.compile(r"libpython\d+\.\d+[a-z]*\.so[.\d]*$")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    pgrp: int
    state: str
    comm: str
    start: int = 0  # start time in clock ticks after boot: orders processes (pids are reused)


@dataclass(frozen=True)
class ProcessIdentity:
    """What a capture names a process by: parent, executable and command line (None / empty: unreadable)."""

    ppid: int | None
    exe: str | None
    cmdline: tuple[str, ...]


def stat_fields(path: str) -> tuple[str, list[str]] | None:
    """The command name and the fields after it of a stat file (/proc/PID/stat, /proc/PID/task/TID/stat):
    fields[0] is the state, [1] the parent, [2] the group, [3] the session, [19] the start time."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    # comm may hold spaces and parentheses: split at the last ')'.
    head, _, rest = data.rpartition(")")
    fields = rest.split()
    return (head.partition("(")[2], fields) if len(fields) >= 4 else None


def read_proc(pid: int) -> ProcInfo | None:
    read = stat_fields(f"/proc/{pid}/stat")
    if read is None:
        return None
    comm, fields = read
    try:
        return ProcInfo(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), pgrp=int(fields[2]), state=fields[0],
                        comm=comm, start=int(fields[19]) if len(fields) > 19 else 0)
    except ValueError:
        return None


def all_processes() -> dict[int, ProcInfo]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = read_proc(int(entry))
            if info is not None:
                found[info.pid] = info
    return found


def process_state(pid: int) -> str | None:
    """One-letter state from /proc/PID/stat ("S", "R", "T" stopped, "t" traced, "Z")."""
    read = stat_fields(f"/proc/{pid}/stat")
    return read[1][0] if read is not None else None


def alive(pid: int) -> bool:
    """Does ``pid`` exist, and is it no zombie?"""
    return process_state(pid) not in (None, *ZOMBIE_STATES)


def gone_reason(pid: int) -> str | None:
    """Why a live capture of ``pid`` cannot start (gone, or a zombie not yet reaped), else None."""
    state = process_state(pid)
    if state is None:
        return "No such process"
    if state in ZOMBIE_STATES:
        return "the process has exited (a zombie not yet reaped)"
    return None


def process_identity(pid: int) -> ProcessIdentity:
    """Parent, executable and command line of a process; what cannot be read is None / empty."""
    info = read_proc(pid)
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        cmdline = tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    except OSError:
        cmdline = ()
    return ProcessIdentity(info.ppid if info is not None else None, exe, cmdline)


def has_env_marker(pid: int, name: str, value: str) -> bool | None:
    """Does process ``pid``'s environment (as it started) hold NAME=VALUE? None: not known yet, the process
    is in the middle of an exec (look again)."""
    needle = f"{name}={value}".encode()
    for _ in range(EXEC_REREADS):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = f.read()
        except OSError:
            return False
        if entries:
            return needle in entries.split(b"\0")
        state = exec_state(pid)
        if state is None:
            return False  # gone, a zombie, a kernel thread: no environment to read
        if state == "starting":
            return None
        time.sleep(0.001)  # the new image's arguments are there, its environment comes next (or it has none)
    return False


# A live process with an empty environment is read again this many times, a millisecond apart: an exec fills in
# the new image's arguments, then its environment, within microseconds; a process started without any environment
# stays empty.
EXEC_REREADS = 5
PF_KTHREAD = 0x00200000  # a stat file's flags: a kernel thread (no command line, no environment, ever)


def exec_state(pid: int) -> str | None:
    """How far a live user process with an empty environment may be in an execve: "starting" (the new image has
    no command line yet either), else "running" (its arguments are there); None for a zombie, a kernel thread or
    a process that is gone."""
    read = stat_fields(f"/proc/{pid}/stat")
    if read is None or read[1][0] in ZOMBIE_STATES:
        return None
    try:
        if int(read[1][6]) & PF_KTHREAD:
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return "running" if f.read(1) else "starting"
    except (IndexError, ValueError, OSError):
        return None


def has_marker(pid: int, run_id: str) -> bool:
    """Was ``pid`` started with run ``run_id``'s marker in its environment?"""
    return bool(has_env_marker(pid, RUN_MARKER_ENV, run_id))


def run_marker(pid: int) -> str | None:
    """The run id in ``pid``'s environment as it started (None: no marker, or unreadable)."""
    prefix = f"{RUN_MARKER_ENV}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    return next((entry[len(prefix):].decode(errors="replace") for entry in entries if entry.startswith(prefix)),
                None)


def _status_field(pid: int, name: str) -> str | None:
    """The value of one field of /proc/PID/status (``name`` without its colon), None when unreadable."""
    prefix = name + ":"
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((line[len(prefix):].strip() for line in f if line.startswith(prefix)), None)
    except OSError:
        return None


def caught_signals(pid: int) -> int | None:
    """The mask of signals ``pid`` has a handler for (bit ``signum - 1``), None when unreadable."""
    try:
        return int(_status_field(pid, "SigCgt") or "", 16)
    except ValueError:
        return None


def core_dumping(pid: int) -> bool:
    """Is the kernel writing ``pid``'s core now (a crash whose dump has not ended it yet)?"""
    return _status_field(pid, "CoreDumping") == "1"


def signal_caught(pid: int, signum: int) -> bool:
    """Does process ``pid`` have a handler for ``signum``? (Signalling one that
    does not would kill it before its native stacks are captured.)"""
    return bool((caught_signals(pid) or 0) & (1 << (signum - 1)))


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


def thread_ids(pid: int) -> list[int]:
    """The threads of ``pid`` (empty: gone or unreadable)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if tid.isdigit())
    except OSError:
        return []


def thread_name(pid: int, tid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() or None
    except OSError:
        return None


def mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, path) of each mapping of a live process, from /proc/PID/maps; the path is "" for an
    anonymous one (empty when unreadable)."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(None, 5)
        start, _, end = fields[0].partition("-") if fields else ("", "", "")
        try:
            found.append((int(start, 16), int(end, 16), fields[5] if len(fields) == 6 else ""))
        except ValueError:
            continue
    return found


def mapping_of(ranges: list[tuple[int, int, str]], address: int | None) -> tuple[int, int] | None:
    """The (start, end) of the mapping of ``ranges`` that holds ``address``, if one does."""
    if address is None:
        return None
    return next(((start, end) for start, end, _ in ranges if start <= address < end), None)


def mapped_libpythons(pid: int) -> list[Path]:
    """The shared libpythons a live process has mapped (empty for a static interpreter)."""
    paths = {path for _, _, path in mappings(pid)}
    return sorted(Path(p) for p in paths if p.startswith("/") and LIBPYTHON.match(Path(p).name))


def oom_kill_count() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (/proc/vmstat, Linux 4.13+;
    None where it is not said). Read around a run: a SIGKILL nobody sent while it grew is the OOM killer's."""
    try:
        fd = os.open("/proc/vmstat", os.O_RDONLY)
        try:
            text = b"\n" + os.read(fd, 1 << 16)  # the whole file in one read (a line loop doubled its cost)
        finally:
            os.close(fd)
        at = text.find(b"\noom_kill ")
        return int(text[at + 10:text.index(b"\n", at + 1)]) if at >= 0 else None
    except (OSError, ValueError):
        return None


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
