"""The fast back ends' pure logic: pystack records into frames, eu-stack text into frames, a core's crashed
thread from its notes, and the per-process fallback between back ends. No process is started: the inputs
are trimmed from real captures (CPython 3.11 and 3.13, glibc 2.36, elfutils 0.188)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from lifeguard.capture.bounded import ToolRun
from lifeguard.capture.core_notes import crashed_thread
from lifeguard.capture.eu_stack import parse_eu_stack
from lifeguard.capture.native import HangBackend, capture_process
from lifeguard.capture.pystack_parse import build_live, merge_frames, native_frame, parse_document, thread_gil
from lifeguard.model.stacks import GIL_HELD, GIL_RELEASED, GIL_WAITING, Backend, Frame, ProcessStacks
from lifeguard.proc.procfs import ProcessIdentity

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBPY = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
EXE = "/root/.pyenv/versions/3.11.7/bin/python3.11"


def native(symbol: str, address: int, *, library: str = LIBPY, path: str = "Python/ceval.c", line: int = 1,
           eval_frame: bool = False) -> dict[str, Any]:
    return {"address": address, "symbol": symbol, "path": path, "line": line, "library": library,
            "eval": eval_frame}


def python(function: str, line: int, *, entry: bool = False, shim: bool = False) -> dict[str, Any]:
    return {"function": function, "file": "/tmp/hung.py", "line": line, "entry": entry, "shim": shim}


# A 3.11 worker thread, outermost first as pystack gives it: two eval frames, two entry frames.
WORKER_NATIVE = [
    native("__clone3", 0x10, library=LIBC, path="../sysdeps/unix/sysv/linux/x86_64/clone3.S", line=81),
    native("thread_run", 0x20, path="./Modules/_threadmodule.c"),
    native("_PyEval_EvalFrameDefault", 0x30, eval_frame=True),
    native("do_call_core (inlined)", 0x30),
    native("_PyEval_EvalFrameDefault", 0x40, eval_frame=True),
    native("lock_PyThread_acquire_lock", 0x50, path="./Modules/_threadmodule.c"),
    native("__futex_abstimed_wait_common", 0x60, library=LIBC, path="./nptl/futex-internal.c", line=87),
    native("__futex_abstimed_wait_common64 (inlined)", 0x60, library=LIBC, path="./nptl/futex-internal.c", line=57),
]
WORKER_PYTHON = [python("_bootstrap", 1002, entry=True), python("run", 982), python("worker", 7, entry=True),
                 python("inner", 5)]


def names(frames: tuple[Frame, ...]) -> list[str]:
    return [("py " if f.is_python else "") + (f.function or "??") for f in frames]


def test_python_frames_sit_just_before_the_eval_frame_that_runs_them() -> None:
    frames, exact = merge_frames(WORKER_NATIVE, WORKER_PYTHON, EXE)  # type: ignore[arg-type]
    assert exact
    assert names(frames) == [
        "__futex_abstimed_wait_common64", "__futex_abstimed_wait_common", "lock_PyThread_acquire_lock",
        "py inner", "py worker", "_PyEval_EvalFrameDefault",
        "do_call_core", "py run", "py _bootstrap", "_PyEval_EvalFrameDefault",
        "thread_run", "__clone3",
    ]
    assert frames[0].inline and not frames[1].inline and frames[0].address == frames[1].address == "0x60"
    assert frames[3] == Frame("inner", "/tmp/hung.py", 5, is_python=True)
    assert frames[-1].library == LIBC and frames[-1].line == 81


def test_frames_that_do_not_pair_up_are_placed_by_position_and_say_so() -> None:
    one_eval = [record for record in WORKER_NATIVE if record["address"] != 0x40]
    frames, exact = merge_frames(one_eval, WORKER_PYTHON, EXE)  # type: ignore[arg-type]
    assert not exact
    assert [f.function for f in frames if f.is_python] == ["inner", "worker", "run", "_bootstrap"]
    assert frames[frames.index(next(f for f in frames if f.is_python)) + 4].is_eval_frame
    # A 3.12 shim frame is no Python function.
    with_shim = [python("<shim>", 0, entry=True, shim=True), *WORKER_PYTHON]
    frames, _ = merge_frames(one_eval, with_shim, EXE)  # type: ignore[arg-type]
    assert "<shim>" not in [f.function for f in frames]


def test_native_frames_read_as_gdb_names_them() -> None:
    versioned = native_frame(native("__libc_start_main@@GLIBC_2.34", 0x1, library=LIBC), EXE)  # type: ignore[arg-type]
    assert versioned.function == "__libc_start_main"
    start = native_frame(native("_start", 0x2, library=EXE, path="???", line=0), EXE)  # type: ignore[arg-type]
    assert start.library is None and start.file is None and start.line is None
    unknown = native_frame(native("???", 0x3, library="/lib/libffi.so.8", path="libffi.so.8", line=0),
                           EXE)  # type: ignore[arg-type]
    assert unknown.function is None and unknown.file is None and unknown.library == "/lib/libffi.so.8"


def record(holds: int, version: list[int] | None = None) -> dict[str, Any]:
    return {"tid": 1, "holds_the_gil": holds, "python_version": [3, 11] if version is None else version}


def test_gil_state_from_the_stack_and_from_the_interpreter() -> None:
    take_gil = (Frame("take_gil"), Frame("PyEval_RestoreThread"))
    assert thread_gil(take_gil, record(0)) == GIL_WAITING  # type: ignore[arg-type]
    assert thread_gil((), record(1)) == GIL_HELD  # type: ignore[arg-type]
    assert thread_gil((), record(0)) == GIL_RELEASED  # type: ignore[arg-type]
    assert thread_gil((), record(-1)) is None  # type: ignore[arg-type]
    finalized = {"tid": 1, "holds_the_gil": 0, "python_version": None}
    assert thread_gil((), finalized) is None  # type: ignore[arg-type]


def run_of(stdout: str = "", *, stderr: str = "", timed_out: bool = False, returncode: int | None = 0) -> ToolRun:
    return ToolRun(stdout, stderr, timed_out, returncode, 0.25)


def test_reader_failures_are_messages() -> None:
    assert parse_document(run_of(timed_out=True), 8.0) == (None, "pystack timed out after 8s")
    _, error = parse_document(run_of(stderr="Traceback\nImportError: no _pystack", returncode=1), 8.0)
    assert error is not None and "exit status 1" in error and "ImportError: no _pystack" in error
    refused = json.dumps({"error": {"type": "EngineError", "message": "Engine error: Operation not permitted"}})
    _, error = parse_document(run_of(refused), 8.0)
    assert error is not None and error.startswith("pystack could not read the process: Operation not permitted")
    assert "CAP_SYS_PTRACE" in error


def test_a_live_document_becomes_process_stacks() -> None:
    thread = {"tid": 4242, "name": "worker", "holds_the_gil": 1, "gc_collecting": 0, "python_version": [3, 11],
              "interpreter_id": 0, "native": WORKER_NATIVE, "python": WORKER_PYTHON}
    again = {**thread, "interpreter_id": 1}
    document = json.dumps({"threads": [thread, again], "pystack": "1.7.2"})
    info = ProcessIdentity(ppid=1, exe=EXE, cmdline=("python", "hung.py"))
    # pid 0: no /proc entry to name threads from, so pystack's own names stay.
    stacks = build_live(0, info, run_of(document), 8.0)
    assert stacks.ok and stacks.backend is Backend.PYSTACK and stacks.duration == 0.25
    [only] = stacks.threads
    assert only.tid == 4242 and only.name == "worker" and only.gil == GIL_HELD and only.pthread_id is None
    assert any("listed again" in note for note in stacks.notes)
    empty = build_live(0, info, run_of(json.dumps({"threads": []})), 8.0)
    assert empty.error is not None and "no threads" in empty.error


EU_STACK_OUTPUT = """\
PID 5047 - process
TID 5047:
#0  0x00007f8b98ca3f16 __futex_abstimed_wait_common64 - /usr/lib/x86_64-linux-gnu/libc.so.6
    ./nptl/futex-internal.c:57:12
#1  0x00007f8b98ca3f16 __futex_abstimed_wait_common - /usr/lib/x86_64-linux-gnu/libc.so.6
    ./nptl/futex-internal.c:87:9
#2  0x00007f8b98caed90 pthread_cond_wait@@GLIBC_2.3.2 - /usr/lib/x86_64-linux-gnu/libc.so.6
#3  0x000055bdb62593f2 - /usr/bin/blocked
#4  0x000055bdb6240000 recurse - /usr/bin/blocked
    /src/blocked.c:10:5
#5  0x000055bdb6240000 recurse - /usr/bin/blocked
    /src/blocked.c:10:5
TID 5049:
#0  0x00007f8b98c45305 __libc_start_main_impl - /usr/lib/x86_64-linux-gnu/libc.so.6
"""


def test_eu_stack_text_becomes_frames() -> None:
    threads = dict(parse_eu_stack(EU_STACK_OUTPUT, "/usr/bin/blocked"))
    assert sorted(threads) == [5047, 5049]
    frames = threads[5047]
    assert [f.function for f in frames] == ["__futex_abstimed_wait_common64", "__futex_abstimed_wait_common",
                                            "pthread_cond_wait", None, "recurse", "recurse"]
    assert [f.inline for f in frames] == [True, False, False, False, False, False]  # a recursion is no inlining
    assert (frames[0].file, frames[0].line, frames[0].library) == ("./nptl/futex-internal.c", 57, LIBC)
    assert frames[2].file is None and frames[3].library is None and frames[3].address == "0x55bdb62593f2"
    assert (frames[4].file, frames[4].line) == ("/src/blocked.c", 10)


def elf_core(prstatus_pid: int) -> bytes:
    """A minimal 64-bit little-endian ELF core: the header, one PT_NOTE, an NT_PRSTATUS and an NT_PRPSINFO."""
    def note(kind: int, desc: bytes) -> bytes:
        name = b"CORE\0\0\0\0"
        return struct.pack("<III", 5, len(desc), kind) + name + desc

    prstatus = bytearray(336)
    struct.pack_into("<i", prstatus, 32, prstatus_pid)
    notes = note(3, bytes(136)) + note(1, bytes(prstatus)) + note(1, bytes(336))
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, 1)  # e_phentsize, e_phnum
    phdr = bytearray(56)
    struct.pack_into("<I", phdr, 0, 4)  # PT_NOTE
    struct.pack_into("<Q", phdr, 0x08, 64 + 56)  # p_offset
    struct.pack_into("<Q", phdr, 0x20, len(notes))  # p_filesz
    return bytes(header + phdr + notes)


def test_the_crashed_thread_is_the_first_prstatus_note(tmp_path: Path) -> None:
    core = tmp_path / "core"
    core.write_bytes(elf_core(31337))
    assert crashed_thread(core) == 31337
    core.write_bytes(b"not an ELF file at all, but long enough to hold a header" + bytes(16))
    assert crashed_thread(core) is None
    assert crashed_thread(tmp_path / "missing") is None


def backend(name: str, error: str | None, calls: list[str]) -> HangBackend:
    def capture(pid: int, timeout: float) -> ProcessStacks:
        calls.append(name)
        return ProcessStacks(pid=pid, error=error)

    return HangBackend(name, lambda: "1.0", capture, 5.0, "")


def test_a_failed_back_end_hands_the_process_to_the_next() -> None:
    calls: list[str] = []
    alive = os.getpid()  # a process that exists: the failure is not "gone"
    result = capture_process(alive, (backend("first", "boom", calls), backend("second", None, calls)))
    assert calls == ["first", "second"] and result.ok
    assert result.notes == ("read by second after: first: boom",)


def test_failures_no_back_end_can_get_past_end_the_ladder() -> None:
    calls: list[str] = []
    refused = backend("first", "attach failed: Operation not permitted", calls)
    result = capture_process(os.getpid(), (refused, backend("second", None, calls)))
    assert calls == ["first"] and result.error == "first: attach failed: Operation not permitted"
    calls.clear()
    every = capture_process(os.getpid(), (backend("a", "x", calls), backend("b", "y", calls)))
    assert every.error == "a: x; b: y"


def test_no_back_end_starts_after_the_budget_is_spent() -> None:
    calls: list[str] = []
    result = capture_process(os.getpid(), (backend("first", "boom", calls), backend("second", None, calls)),
                             budget=0.5)
    assert calls == [] and result.error == "first: not tried, the 0.5s capture deadline had passed"
