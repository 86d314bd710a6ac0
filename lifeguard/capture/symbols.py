"""Names for native frames a back end left unnamed.

pystack names a frame from a library's dynamic symbols and debug info; a function that is only in
the full symbol table (``gomp_team_barrier_wait_end`` in a wheel's vendored libgomp) comes back as
``??``, and a finding would say "?? in libgomp". elfutils' eu-addr2line reads the same addresses
against the live process (or the core) with every symbol table, in one bounded call.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from lifeguard.capture.bounded import run_bounded
from lifeguard.model.stacks import Frame, ProcessStacks

RESOLVE_TIMEOUT = 10.0
MAX_ADDRESSES = 2000


def _unnamed(frame: Frame) -> bool:
    return not frame.is_python and not frame.inline and frame.address is not None and frame.function in (None, "??")


Location = tuple[str | None, str | None, int | None]  # function, source file, line


def _location(function: str, where: str) -> Location | None:
    """eu-addr2line's two lines for one address; None when it knew nothing. A function's cold part
    (GCC's .cold split) often has a source line but no symbol: keep the line."""
    name = function.strip() if function.strip() not in ("", "??") else None
    file, _, line = where.strip().rpartition(":")
    if where.count(":") >= 2:  # file:line:column
        file, _, line = file.rpartition(":")
    known_file = file if file and file != "??" else None
    number = int(line) if line.isdigit() and int(line) > 0 else None
    if name is None and known_file is None:
        return None
    return name, known_file, number


def _addr2line(source: list[str], addresses: list[str]) -> dict[str, Location]:
    tool = shutil.which("eu-addr2line")
    if tool is None or not addresses:
        return {}
    done = run_bounded([tool, *source, "-f", "-C", *addresses], RESOLVE_TIMEOUT)
    if done.returncode != 0:
        return {}
    lines = done.stdout.splitlines()
    if len(lines) != 2 * len(addresses):  # a function line and a file:line line per address
        return {}
    names = {}
    for position, address in enumerate(addresses):
        found = _location(lines[2 * position], lines[2 * position + 1])
        if found is not None:
            names[address] = found
    return names


def _named(process: ProcessStacks, names: dict[str, Location]) -> ProcessStacks:
    def fix(frame: Frame) -> Frame:
        if not _unnamed(frame) or frame.address not in names:
            return frame
        function, file, line = names[frame.address]
        return replace(frame, function=function or frame.function, file=frame.file or file,
                       line=frame.line if frame.file else line)

    return replace(process, threads=tuple(replace(t, frames=tuple(fix(f) for f in t.frames))
                                          for t in process.threads))


def _addresses(process: ProcessStacks) -> list[str]:
    found = {f.address for t in process.threads for f in t.frames if _unnamed(f) and f.address}
    return sorted(found)[:MAX_ADDRESSES]


def resolve_live(processes: list[ProcessStacks]) -> list[ProcessStacks]:
    """Name the unnamed frames of live processes (they are still alive: a hang is killed after capture)."""
    out = []
    for process in processes:
        addresses = _addresses(process)
        names = _addr2line([f"--pid={process.pid}"], addresses) if addresses and process.pid > 0 else {}
        out.append(_named(process, names) if names else process)
    return out


def resolve_core(process: ProcessStacks, core: Path) -> ProcessStacks:
    """Name the unnamed frames of a process read from ``core`` (before the core is deleted); the core's
    own link map names every module."""
    addresses = _addresses(process)
    names = _addr2line([f"--core={core}"], addresses) if addresses else {}
    return _named(process, names) if names else process
