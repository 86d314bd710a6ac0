"""Names for native frames a back end left unnamed.

pystack names a frame from a library's dynamic symbols and debug info; a function that is only in
the full symbol table (``gomp_team_barrier_wait_end`` in a wheel's vendored libgomp) comes back as
``??``, and a finding would say "?? in libgomp". elfutils' eu-addr2line reads the same addresses
against the live process (or the core) with every symbol table, in one bounded call.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from lifeguard.capture.bounded import run_bounded
from lifeguard.model.stacks import Frame, ProcessStacks
from lifeguard.proc.procfs import mappings
from lifeguard.proc.threadread import read_memory

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


# A signal's trampoline: the frame above it was interrupted at its pc, not called from it.
_TRAMPOLINES = ("__restore_rt", "<signal handler called>")


def _lookup(frames: tuple[Frame, ...], position: int) -> str | None:
    """The address to name a frame by. A caller's pc is its return address, one past its call: a call to a
    noreturn function (abort, __assert_fail) that ends its caller returns to the next function's first byte,
    and the caller would be named as that function or not at all. So callers are looked up one byte back."""
    frame = frames[position]
    if frame.address is None:
        return None
    interrupted = position == 0 or frames[position - 1].function in _TRAMPOLINES
    if interrupted:
        return frame.address
    try:
        return hex(int(frame.address, 16) - 1)
    except ValueError:
        return frame.address


def _named(process: ProcessStacks, names: dict[str, Location]) -> ProcessStacks:
    def fix(frames: tuple[Frame, ...], position: int) -> Frame:
        frame = frames[position]
        address = _lookup(frames, position)
        if not _unnamed(frame) or address not in names:
            return frame
        function, file, line = names[address]
        return replace(frame, function=function or frame.function, file=frame.file or file,
                       line=frame.line if frame.file else line)

    return replace(process, threads=tuple(replace(t, frames=tuple(fix(t.frames, i) for i in range(len(t.frames))))
                                          for t in process.threads))


def _addresses(process: ProcessStacks) -> list[str]:
    found = {address for t in process.threads for i, f in enumerate(t.frames)
             if _unnamed(f) and (address := _lookup(t.frames, i))}
    return sorted(found)[:MAX_ADDRESSES]


def _in_executable(process: ProcessStacks) -> ProcessStacks:
    """Native frames a back end left without a library that lie in the process's executable get its path: a
    statically linked interpreter's own code (Debian's python3.14) is then known as the interpreter's, not as
    the culprit of a hang."""
    try:
        executable = os.readlink(f"/proc/{process.pid}/exe")
    except OSError:
        return process
    ranges = [(start, end) for start, end, path in mappings(process.pid) if path == executable]
    if not ranges:
        return process

    def fix(frame: Frame) -> Frame:
        if frame.is_python or frame.library is not None or not frame.address:
            return frame
        try:
            address = int(frame.address, 16)
        except ValueError:
            return frame
        inside = any(start <= address < end for start, end in ranges)
        return replace(frame, library=executable) if inside else frame

    return replace(process, threads=tuple(replace(t, frames=tuple(fix(f) for f in t.frames)) for t in process.threads))


# x86-64 PLT stubs, each ending in "jmp *GOT(%rip)": the classic .plt entry, and .plt.sec's with endbr64 (and bnd).
_STUB_JUMPS = (b"\xff\x25", b"\xf3\x0f\x1e\xfa\xff\x25", b"\xf3\x0f\x1e\xfa\xf2\xff\x25")
_CALL_REL32 = 0xE8


def _call_target(pid: int, return_address: int) -> int | None:
    """The function a direct call before ``return_address`` reached: through its PLT stub's GOT slot (bound,
    since the call was made) when the call went to a stub, else the call's own target."""
    call = read_memory(pid, return_address - 5, 5)
    if call is None or call[0] != _CALL_REL32:
        return None
    target = return_address + int.from_bytes(call[1:], "little", signed=True)
    stub = read_memory(pid, target, 11) or b""
    jump = next((j for j in _STUB_JUMPS if stub.startswith(j)), None)
    if jump is None:
        return target
    end = len(jump) + 4
    slot = read_memory(pid, target + end + int.from_bytes(stub[len(jump):end], "little", signed=True), 8)
    return int.from_bytes(slot, "little") if slot is not None else None


def call_sites(process: ProcessStacks) -> ProcessStacks:
    """Where a library has no symbols (libc without its debug symbols) a thread's innermost frames stay nameless,
    and a wait in pthread_join reads as a wait in "??": the caller's call instruction, read from the live
    process, still names the function it called (``Frame.calls``)."""
    wanted: dict[tuple[int, int], int] = {}  # (thread, position) -> the called function's address
    for index, thread in enumerate(process.threads):
        for position in range(1, len(thread.frames)):
            frame, callee = thread.frames[position], thread.frames[position - 1]
            if frame.is_python or frame.inline or not frame.address or not _unnamed(callee):
                continue
            try:
                return_address = int(frame.address, 16)
            except ValueError:
                continue
            target = _call_target(process.pid, return_address) if len(wanted) < MAX_ADDRESSES else None
            if target is not None:
                wanted[index, position] = target
    names = _addr2line([f"--pid={process.pid}"], sorted({hex(a) for a in wanted.values()})) if wanted else {}
    if not names:
        return process
    threads = list(process.threads)
    for (index, position), target in wanted.items():
        function = names.get(hex(target), (None, None, None))[0]
        if function:
            frames = list(threads[index].frames)
            frames[position] = replace(frames[position], calls=function)
            threads[index] = replace(threads[index], frames=tuple(frames))
    return replace(process, threads=tuple(threads))


def resolve_live(processes: list[ProcessStacks]) -> list[ProcessStacks]:
    """Name the unnamed frames of live processes (they are still alive: a hang is killed after capture), and
    give the executable's frames its path."""
    out = []
    for process in processes:
        process = _in_executable(process) if process.pid > 0 else process
        addresses = _addresses(process)
        names = _addr2line([f"--pid={process.pid}"], addresses) if addresses and process.pid > 0 else {}
        process = _named(process, names) if names else process
        out.append(call_sites(process) if process.pid > 0 else process)
    return out


def resolve_core(process: ProcessStacks, core: Path) -> ProcessStacks:
    """Name the unnamed frames of a process read from ``core`` (before the core is deleted); the core's
    own link map names every module."""
    addresses = _addresses(process)
    names = _addr2line([f"--core={core}"], addresses) if addresses else {}
    return _named(process, names) if names else process
