"""Thread state from /proc: what the kernel says about a process gdb is about to attach to.

Read before a capture (parent, executable, command line, whether it is still alive),
after one (thread names, whether a killed gdb left it stopped), and to find the
libpython a process has mapped (its python-gdb extension sits beside it).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

STOPPED_STATES = ("T", "t")
ZOMBIE_STATES = ("Z", "X")
# A shared libpython's file name: "libpython3.11.so.1.0", "libpython3.13t.so".
LIBPYTHON = re.compile(r"libpython\d+\.\d+[a-z]*\.so[.\d]*$")


@dataclasses.dataclass(frozen=True)
class ProcInfo:
    ppid: int | None
    exe: str | None
    cmdline: tuple[str, ...]


def proc_info(pid: int) -> ProcInfo:
    """Parent, executable and command line of a process; what cannot be read is None / empty."""
    ppid = None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # The command name may contain spaces and parentheses: fields start after the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        pass
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        cmdline = tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    except OSError:
        cmdline = ()
    return ProcInfo(ppid, exe, cmdline)


def thread_name(pid: int, tid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() or None
    except OSError:
        return None


def process_state(pid: int) -> str | None:
    """One-letter state from /proc/PID/stat ("S", "R", "T" stopped, "t" traced, "Z")."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def mapped_libpythons(pid: int) -> list[Path]:
    """The shared libpythons a live process has mapped (empty for a static interpreter)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return []
    paths = {line.split(None, 5)[-1] for line in maps.splitlines() if line.count(" ") >= 5}
    return sorted(Path(p) for p in paths if p.startswith("/") and LIBPYTHON.match(Path(p).name))


def gone_reason(pid: int) -> str | None:
    """Why a live capture of ``pid`` cannot start (gone, or a zombie not yet reaped), else None."""
    state = process_state(pid)
    if state is None:
        return "No such process"
    if state in ZOMBIE_STATES:
        return "the process has exited (a zombie not yet reaped)"
    return None
