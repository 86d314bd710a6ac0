"""The stacks of a failed run as a reader needs them: the culprit first, in full; the rest one line each.

Processes are ordered by relevance (those a finding names, the crashed one, forked children before the
parents that wait for them). The threads a finding names, and a crashed thread, are printed in full;
every other thread gets one line (name, kernel state, innermost meaningful frame). lifeguard's own
bootstrap and runpy frames, and the interpreter start-up under them, are hidden (report.json keeps them,
marked ``harness``); runs of interpreter call machinery collapse to their first frame. Nothing a finding
rests on is cut by a line limit: the full text of every thread is in backtraces.txt.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifeguard.child.protocol import FORKED
from lifeguard.diagnose.crash import CLEANUP_STEPS, is_plumbing
from lifeguard.diagnose.evidence import CALL_MACHINERY, matches
from lifeguard.model.result import RunResult
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

# At most this many one-line threads a process; the rest are counted (all are in backtraces.txt).
MAX_SUMMARY_THREADS = 24
_SYSTEM = ("libc.so", "libc-", "libpthread", "ld-linux")
# The call that ends a test forked from pytest (ctypes.pythonapi.Py_Exit) sits under its exit's frames: outer
# plumbing there, hidden with the rest of the start-up (a crash *in* a ctypes call keeps them: they are inner).
_CTYPES_CALL = ("libffi.so", "_ctypes.")
# Native frames that are only how a thread starts or how the interpreter runs code.
_STARTUP = ("_start", "__libc_start", "main", "Py_BytesMain", "Py_RunMain", "Py_Main", "pymain_", "PyRun_",
            "run_mod", "run_eval_code_obj", "start_thread", "clone", "clone3", "thread_run", "pythread_wrapper")


# More of the interpreter's calling frames (besides evidence.CALL_MACHINERY).
_CALL_EXTRA = ("builtin_exec", "run_eval_code_obj", "run_mod", "pyrun_", "_PyObject_Call", "object_vacall",
               "call_function", "do_call_core", "function_code_fastcall")


def _short(path: str | None) -> str:
    return (path or "?").rsplit("/", 1)[-1]


def _is_interpreter(frame: Frame) -> bool:
    return frame.in_interpreter


def _is_call_machinery(frame: Frame) -> bool:
    """The interpreter calling the next function: collapsible. Its other frames (a cleanup step, a
    dealloc, the GIL) say what the thread does, and stay."""
    name = (frame.function or "").lstrip("_")
    return frame.in_interpreter and name.startswith(tuple(m.lstrip("_") for m in CALL_MACHINERY + _CALL_EXTRA))


def _is_plumbing(frame: Frame) -> bool:
    """Frames that say nothing about the bug: the harness, interpreter start-up, libc thread start (the
    bootstrap's own ``-c`` line is told apart by trimmed_frames: a -c program's frames are "<string>" too)."""
    if frame.is_python:
        return frame.is_harness
    function = frame.function or ""
    library = frame.library or ""
    return (function.startswith(_STARTUP) or _is_interpreter(frame)
            or any(part in library for part in (*_SYSTEM, *_CTYPES_CALL)))


_CLEANUP_FUNCTIONS = tuple(name for names, _ in CLEANUP_STEPS for name in names)


def _is_cleanup(frame: Frame) -> bool:
    """A step of the shutdown (Py_FinalizeEx, exit()'s handlers, _dl_fini): it says *when* the thread
    crashed, so the outer frames from it inward stay on the terminal."""
    return not frame.is_python and matches(frame.function, _CLEANUP_FUNCTIONS)


def trimmed_frames(thread: ThreadStack) -> tuple[list[Frame | str], int]:
    """The frames to print (a str stands for a collapsed run) and how many outer frames were hidden."""
    frames = list(thread.frames)
    python = [n for n, f in enumerate(frames) if f.is_python]
    # The outermost Python frame is the bootstrap's `-c` line when it is "<string>"; any other "<string>"
    # frame is a -c program's own, and stays.
    bootstrap_line = python[-1] if python and frames[python[-1]].file == "<string>" else -1
    last = len(frames) - 1
    while last >= 0 and (_is_plumbing(frames[last]) or last == bootstrap_line) and not _is_cleanup(frames[last]):
        last -= 1
    if last < 0:
        last = len(frames) - 1  # nothing but plumbing: show it all rather than nothing
    hidden = len(frames) - 1 - last
    shown: list[Frame | str] = []
    position = 0
    kept = frames[: last + 1]
    # A handler that re-raised the signal (faulthandler does) leaves a second copy of the delivery
    # frames above the signal trampoline: show the trampoline once, with what it stands for.
    trampoline = next((n for n, f in enumerate(kept) if f.function == "__restore_rt"), None)
    if trampoline is not None and all(is_plumbing(f) for f in kept[:trampoline]):
        shown.append(f"(the signal, re-raised by its handler: {trampoline + 1} frames)")
        position = trampoline + 1
    while position < len(kept):
        frame = kept[position]
        run_end = position
        if _is_call_machinery(frame):
            while run_end + 1 < len(kept) and _is_call_machinery(kept[run_end + 1]):
                run_end += 1
        repeat_end = position
        while repeat_end + 1 < len(kept) and _same(kept[repeat_end + 1], frame):
            repeat_end += 1
        shown.append(frame)
        if repeat_end > position:
            shown.append(f"(the frame above repeated {repeat_end - position} more time(s))")
            position = repeat_end + 1
            continue
        if run_end - position >= 2:
            shown.append(f"({run_end - position} interpreter frames)")
            position = run_end + 1
            continue
        position += 1
    return shown, hidden


_THREAD_START = ("start_thread", "clone", "clone3", "thread_run", "pythread_wrapper")
_PYTEST_RUNNER = ("/_pytest/", "/pluggy/", "/pytest/__main__.py")


def hidden_parts(frames: Sequence[Frame]) -> str:
    """What the outer frames a stack hides are, as they are: a thread's start, the interpreter's start-up,
    lifeguard's bootstrap, pytest's runner (only those there)."""
    parts: list[str] = []
    for frame in reversed(frames):  # outermost first: the order they ran in
        path = frame.file or ""
        if frame.is_python:
            part = ("pytest's runner" if any(p in path for p in _PYTEST_RUNNER)
                    else "lifeguard's bootstrap" if "lifeguard" in path or path == "<string>"
                    else "the interpreter's start-up")
        elif (frame.function or "").startswith(_THREAD_START):
            part = "the thread's start"
        elif any(p in (frame.library or "") for p in _CTYPES_CALL):
            part = "lifeguard's bootstrap"  # the ctypes call that ends a forked test (Py_Exit)
        else:
            part = "the interpreter's start-up"
        if part not in parts:
            parts.append(part)
    return ", ".join(parts)


def _same(a: Frame, b: Frame) -> bool:
    return (a.function, a.address, a.file, a.line, a.is_python) == (b.function, b.address, b.file, b.line,
                                                                    b.is_python)


def _frame_line(frame: Frame) -> str:
    if frame.is_python:
        return f"      py  {frame.function or '??'} ({frame.file}:{frame.line})"
    source = f" at {_short(frame.file)}:{frame.line}" if frame.file and frame.line is not None else ""
    library = f" [{_short(frame.library)}]" if frame.library else ""
    return f"      {frame.function or '??'}{source}{library}"


def _thread_title(thread: ThreadStack, signal: SignalInfo | None) -> str:
    text = thread.title()
    if signal is not None and signal.tid == thread.tid:
        text += f"  <-- {signal.name or 'signal'}"
    return text


def innermost_meaningful(thread: ThreadStack) -> Frame | None:
    """The first frame, innermost first, that is not libc or wait plumbing: where the thread is, in code
    someone wrote (the library's or the user's); the innermost frame when all are plumbing."""
    natives = [f for f in thread.frames if not f.is_python]
    for frame in thread.frames:
        if frame.is_python and not frame.is_harness:
            return frame
        if frame.is_python or any(part in (frame.library or "") for part in _SYSTEM) or _is_interpreter(frame):
            continue
        return frame
    return natives[0] if natives else None


def _thread_full(thread: ThreadStack, signal: SignalInfo | None, role: str | None) -> list[str]:
    lines = [f"  {_thread_title(thread, signal)}" + (f"  <-- {role}" if role else "")]
    shown, hidden = trimmed_frames(thread)
    for item in shown:
        lines.append(f"      {item}" if isinstance(item, str) else _frame_line(item))
    if hidden:
        lines.append(f"      ({hidden} outer frames hidden: {hidden_parts(thread.frames[-hidden:])})")
    if not thread.frames:
        lines.append("      (no frames)")
    return lines


def _thread_line(thread: ThreadStack, signal: SignalInfo | None) -> str:
    frame = innermost_meaningful(thread)
    where = ""
    if frame is not None:
        where = (f": {frame.function} ({_short(frame.file)}:{frame.line})" if frame.is_python
                 else f": {frame.function or '??'} [{_short(frame.library)}]")
    return f"  {_thread_title(thread, signal)}{where}"


def processes_by_relevance(result: RunResult) -> list[ProcessStacks]:
    """The run's processes, the likeliest culprit first (named by a finding, crashed, newest forked child)."""
    named = [ref.pid for finding in result.findings for ref in finding.threads]
    forked = [e.pid for e in result.events if e.name == FORKED]

    def key(item: tuple[int, ProcessStacks]) -> tuple[int, int]:
        position, process = item
        if process.pid in named:
            return (0, named.index(process.pid))
        if process.signal is not None:
            return (1, position)
        if process.pid in forked:
            return (2, -forked.index(process.pid))  # the newest child first: its parents wait for it
        return (3, position)

    return [p for _, p in sorted(enumerate(result.backtraces), key=key)]


def thread_roles(result: RunResult) -> dict[tuple[int, int], str]:
    """(pid, tid) -> the part a finding gives that thread ("holds the GIL", "forks", ...)."""
    return {(ref.pid, ref.tid): ref.role for finding in result.findings for ref in finding.threads}


def culprit_threads(result: RunResult, process: ProcessStacks, *, first: bool) -> set[int]:
    """The threads of ``process`` shown in full: those a finding names and the one a signal hit; with neither,
    the main thread of the likeliest process (``first``)."""
    full = {t.tid for t in process.threads if (process.pid, t.tid) in thread_roles(result)}
    if process.signal is not None and process.signal.tid is not None:
        full.add(process.signal.tid)
    if not full and first and process.threads:
        full.add(process.threads[0].tid)
    return full


def forked_parents(result: RunResult) -> dict[int | None, object]:
    """pid of each process the run forked -> the pid of its parent (the ``forked`` events)."""
    return {e.pid: e.get("parent") for e in result.events if e.name == FORKED}


def stacks_view(result: RunResult) -> str:
    """The culprit-first text of a run's native stacks (empty when there are none)."""
    roles = thread_roles(result)
    forked = forked_parents(result)
    lines: list[str] = []
    for rank, process in enumerate(processes_by_relevance(result)):
        title = f"Process {process.pid}"
        if process.pid in forked:
            title += f" (forked child of {forked[process.pid]})"
        elif process.ppid is not None:
            title += f" (parent {process.ppid})"
        lines.append(f"{title}  [{process.backend_label}]")
        if process.signal is not None:
            lines.append(f"  killed by {process.signal}")
        if process.error:
            lines.append(f"  capture failed: {process.error}")
        full = culprit_threads(result, process, first=rank == 0)
        summarised = 0
        for thread in process.threads:
            if thread.tid in full:
                lines.extend(_thread_full(thread, process.signal, roles.get((process.pid, thread.tid))))
            elif summarised < MAX_SUMMARY_THREADS:
                lines.append(_thread_line(thread, process.signal))
                summarised += 1
        rest = len(process.threads) - len(full) - summarised
        if rest > 0:
            lines.append(f"  ... and {rest} more thread(s)")
    return "\n".join(lines)
