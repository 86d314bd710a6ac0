"""What pystack_script.py printed, made into ``ProcessStacks``.

pystack gives, per thread, native frames outermost first and the Python frame chain
outermost first, each Python frame flagged ``entry`` where a new
``_PyEval_EvalFrameDefault`` call started running it. Merging the two the way pystack's
own printer does (each eval frame runs the Python frames from one entry up to the next)
puts every Python frame just before (newer than) the eval frame that runs it, the order
ThreadStack.frames promises. When the counts disagree (an eval frame the unwinder
missed) the frames are placed as a faulthandler dump's would be, and a note says so.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any, TypedDict, cast

from lifeguard.capture.bounded import ToolRun, stderr_tail
from lifeguard.capture.faulthandler import insert_python_frames
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import (
    GIL_HELD,
    GIL_RELEASED,
    Backend,
    Frame,
    ProcessStacks,
    ThreadStack,
    infer_gil,
)
from lifeguard.proc.procfs import ProcessIdentity, thread_name

INLINED_SUFFIX = " (inlined)"
# "__libc_start_main@@GLIBC_2.34", "pthread_cond_timedwait@GLIBC_2.3.2": gdb's name is the part before.
_SYMBOL_VERSION = re.compile(r"@@?[A-Za-z_][\w.]*$")
PTRACE_HINT = (
    "is another debugger attached? Otherwise attaching needs root, CAP_SYS_PTRACE, "
    "or /proc/sys/kernel/yama/ptrace_scope set to 0"
)
# Signals whose siginfo carries the faulting address.
_FAULT_SIGNALS = {4: "SIGILL", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}


class NativeRecord(TypedDict):
    address: int
    symbol: str
    path: str
    line: int
    library: str
    eval: bool


class PythonRecord(TypedDict):
    function: str
    file: str
    line: int
    entry: bool
    shim: bool


class ThreadRecord(TypedDict):
    tid: int
    name: str | None
    holds_the_gil: int
    gc_collecting: int
    python_version: list[int] | None
    interpreter_id: int | None
    native: list[NativeRecord]
    python: list[PythonRecord]


def native_frame(record: NativeRecord, executable: str | None) -> Frame:
    symbol = record.get("symbol") or ""
    inline = symbol.endswith(INLINED_SUFFIX)
    if inline:
        symbol = symbol[: -len(INLINED_SUFFIX)]
    symbol = _SYMBOL_VERSION.sub("", symbol)
    library = record.get("library") or None
    path = record.get("path") or ""
    if path == "???" or (library is not None and path in (library, os.path.basename(library))):
        path = ""  # pystack names the library where it knows no source file
    line = record.get("line") or 0
    if library is not None and executable is not None and library == executable:
        library = None  # as gdb reports it: the executable is no shared object
    address = record.get("address")
    return Frame(
        function=symbol if symbol and symbol != "???" else None,
        file=path or None,
        line=line if line > 0 and path else None,
        library=library,
        address=hex(address) if isinstance(address, int) else None,
        inline=inline,
    )


def python_frame(record: PythonRecord) -> Frame:
    line = record.get("line")
    return Frame(function=record.get("function"), file=record.get("file"),
                 line=line if isinstance(line, int) and line > 0 else None, is_python=True)


def merge_frames(native: Sequence[NativeRecord], python: Sequence[PythonRecord],
                 executable: str | None) -> tuple[tuple[Frame, ...], bool]:
    """One thread's frames innermost first, and whether the Python frames were placed exactly.

    Walking outermost in: at each eval frame, take the next Python frame and every later
    one up to (not including) the next ``entry`` frame; shim frames (3.12+, pushed by the
    eval loop itself) mark nothing and are dropped.
    """
    evals = sum(1 for record in native if record.get("eval"))
    entries = sum(1 for record in python if record.get("entry"))
    if evals != entries or not native:
        natives = tuple(native_frame(record, executable) for record in reversed(native))
        pythons = [python_frame(record) for record in reversed(python) if not record.get("shim")]
        return insert_python_frames(natives, pythons), not pythons
    outer_first: list[Frame] = []
    position = 0
    for record in native:
        outer_first.append(native_frame(record, executable))
        if not record.get("eval"):
            continue
        run: list[Frame] = []
        first = True
        while position < len(python) and (first or not python[position].get("entry")):
            if not python[position].get("shim"):
                run.append(python_frame(python[position]))
            first = False
            position += 1
        outer_first.extend(run)
    return tuple(reversed(outer_first)), True


def thread_gil(frames: Sequence[Frame], record: ThreadRecord) -> str | None:
    """``waiting`` from the stack (take_gil...); else what pystack read from the interpreter's GIL.

    A thread of no live interpreter (python_version None: finalized, or never initialised)
    has no GIL to hold: unknown rather than "released".
    """
    waiting = infer_gil(frames, None, None, None)
    if waiting is not None:
        return waiting
    if record.get("python_version") is None:
        return None
    holds = record.get("holds_the_gil")
    if not isinstance(holds, int) or holds < 0:
        return None
    return GIL_HELD if holds > 0 else GIL_RELEASED


def build_threads(records: Sequence[ThreadRecord], pid: int | None, executable: str | None,
                  names_from_proc: bool) -> tuple[tuple[ThreadStack, ...], list[str]]:
    threads: list[ThreadStack] = []
    notes: list[str] = []
    seen: set[int] = set()
    for record in records:
        tid = int(record["tid"])
        if tid in seen:
            # One thread attached to several interpreters: pystack lists it once per interpreter.
            notes.append(f"thread {tid} is listed again for interpreter {record.get('interpreter_id')}; kept the first")
            continue
        seen.add(tid)
        frames, exact = merge_frames(record.get("native") or [], record.get("python") or [], executable)
        if not exact:
            notes.append(f"thread {tid}: Python frames placed by position (pystack's eval and entry frames "
                         "did not pair up)")
        name = thread_name(pid, tid) if names_from_proc and pid is not None else None
        threads.append(ThreadStack(tid=tid, name=name or record.get("name"), gil=thread_gil(frames, record),
                                   frames=frames))
    return tuple(threads), notes


def _error_message(error: dict[str, Any]) -> str:
    message = str(error.get("message") or error.get("type") or "unknown error")
    message = message.removeprefix("Engine error: ")
    kind = error.get("type")
    text = f"pystack could not read the process: {message}"
    if kind and kind not in ("EngineError", "PystackError"):
        text = f"pystack could not read the process ({kind}): {message}"
    if "Operation not permitted" in message:
        text += f" ({PTRACE_HINT})"
    return text


def parse_document(run: ToolRun, timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON document the script printed, or why there is none."""
    if run.timed_out:
        return None, f"pystack timed out after {timeout:g}s"
    line = next((line for line in reversed(run.stdout.splitlines()) if line.startswith("{")), None)
    if line is None:
        tail = stderr_tail(run.stderr)
        return None, f"pystack ended without a capture (exit status {run.returncode}): {tail or 'no output'}"
    try:
        document = json.loads(line)
    except json.JSONDecodeError as error:
        return None, f"pystack printed unreadable output: {error}"
    if not isinstance(document, dict):
        return None, "pystack printed unreadable output: not an object"
    if isinstance(document.get("error"), dict):
        return document, _error_message(document["error"])
    return document, None


def build_live(pid: int, info: ProcessIdentity, run: ToolRun, timeout: float) -> ProcessStacks:
    """The stacks of one live process as the script read them, or why there are none (``error``)."""
    document, error = parse_document(run, timeout)
    threads: tuple[ThreadStack, ...] = ()
    notes: list[str] = []
    if document is not None and error is None:
        records = cast(list[ThreadRecord], document.get("threads") or [])
        threads, notes = build_threads(records, pid, info.exe, names_from_proc=True)
        if not threads:
            error = "pystack found no threads: the process is gone"
    return ProcessStacks(pid=pid, ppid=info.ppid, exe=info.exe, cmdline=info.cmdline, backend=Backend.PYSTACK,
                         threads=threads, error=error, notes=tuple(notes), duration=round(run.duration, 3))


def core_signal(failure: dict[str, Any] | None, crashed_tid: int | None) -> SignalInfo | None:
    """What killed the process of a core: the siginfo pystack read, and the thread that got it."""
    if not failure and crashed_tid is None:
        return None
    failure = failure or {}
    number = failure.get("si_signo")
    name = None
    if isinstance(number, int) and number > 0:
        import signal

        try:
            name = signal.Signals(number).name
        except ValueError:
            name = None
    address = failure.get("failed_addr")
    return SignalInfo(
        name=name,
        number=number if isinstance(number, int) else None,
        code=failure.get("si_code"),
        address=hex(address) if number in _FAULT_SIGNALS and isinstance(address, int) else None,
        tid=crashed_tid,
    )


def build_core(exe: str, run: ToolRun, timeout: float, crashed_tid: int | None) -> ProcessStacks:
    """The stacks in one core file as the script read them; ``crashed_tid`` from the core's notes."""
    document, error = parse_document(run, timeout)
    threads: tuple[ThreadStack, ...] = ()
    notes: list[str] = []
    pid = 0
    cmdline: tuple[str, ...] = ()
    signal_info = None
    if document is not None:
        pid = int(document.get("pid") or 0)
        psinfo = document.get("psinfo") or {}
        cmdline = tuple(str(psinfo.get("psargs") or "").split())
        signal_info = core_signal(document.get("failure"), crashed_tid)
        notes.extend(str(problem) for problem in document.get("problems") or [])
        missing = document.get("missing_modules") or []
        if missing:
            notes.append(f"shared objects of the core not found here (their frames lack symbols): "
                         f"{', '.join(missing[:5])}")
    if document is not None and error is None:
        records = cast(list[ThreadRecord], document.get("threads") or [])
        threads, more = build_threads(records, pid, exe, names_from_proc=False)
        notes.extend(more)
        if not threads:
            error = "pystack found no threads in the core"
    return ProcessStacks(pid=pid, exe=exe, cmdline=cmdline, backend=Backend.PYSTACK_CORE, threads=threads,
                         error=error, signal=signal_info, notes=tuple(notes), duration=round(run.duration, 3))
