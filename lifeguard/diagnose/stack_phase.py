"""What phase of its life a process was in, read off its main thread's stack: the kernel's and the stacks'
word on a crash or a hang, which outranks the events the process wrote about itself (a program may write a
``body-end`` line and crash in its body; one may crash before it could say that its body ended)."""

from __future__ import annotations

from collections.abc import Sequence

from lifeguard.capture.faulthandler import parse_faulthandler
from lifeguard.child.protocol import BODY_FRAMES, CHILD_PACKAGE, EXIT_FRAMES, FORKED
from lifeguard.diagnose.crash import CLEANUP_STEPS
from lifeguard.diagnose.evidence import matches
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult
from lifeguard.model.stacks import Frame, ProcessStacks

# The interpreter's exit and the C library's, from Py_Exit to the static destructors (not "exit" itself:
# matched without its underscores, it would name os._exit's "_exit").
EXIT_FUNCTIONS = ("Py_Exit", "__run_exit_handlers", *(name for names, _ in CLEANUP_STEPS for name in names))
# Where the interpreter runs the program's code (the -c command, a script): a main thread under it and under
# no exit function was in its import or its body, never in its exit.
RUNNING_FUNCTIONS = ("pymain_run_python", "pymain_run_command", "pymain_run_file", "PyRun_SimpleStringFlags")
_FATAL_LINE = "Fatal Python error:"


def stack_phase(frames: Sequence[Frame]) -> Phase | None:
    """The phase a main thread's stack (innermost first) is in: EXIT under the interpreter's or the C
    library's exit, RUN inside the child's body runner; None when the stack does not say."""
    running = False
    for frame in frames:
        if frame.is_python:
            if (frame.file or "").rpartition("/")[0].endswith(CHILD_PACKAGE):
                if frame.function in EXIT_FRAMES:
                    return Phase.EXIT
                if frame.function in BODY_FRAMES:
                    return Phase.RUN
        elif matches(frame.function, EXIT_FUNCTIONS):
            return Phase.EXIT
        elif matches(frame.function, RUNNING_FUNCTIONS):
            running = True
    return Phase.RUN if running else None


def _main_process(result: RunResult) -> ProcessStacks | None:
    """The run's own process among the crashed or hung ones (not a forked child of it)."""
    forked = {e.pid for e in result.events if e.name == FORKED}
    own = [p for p in result.backtraces if p.pid not in forked and p.thread(p.pid) is not None]
    crashed = [p for p in own if p.signal is not None]
    return next(iter(crashed or own), None)


def _last_fatal_dump(text: str) -> dict[int, list[Frame]]:
    """The Python stacks of the last fatal error's dump in a stderr (the process that died last)."""
    start = text.rfind(_FATAL_LINE)
    return parse_faulthandler(text[start:]) if start >= 0 else {}


def observed_phase(result: RunResult) -> tuple[Phase, str] | None:
    """The phase the stacks show for a crashed or hung run, with where it was read, when they contradict
    the run's phase; None when they agree or do not say. A forked child's failure stays the fork-child's."""
    if result.outcome not in (Outcome.CRASHED, Outcome.HUNG) or result.phase is Phase.FORK_CHILD:
        return None
    seen: tuple[Phase, str] | None = None
    process = _main_process(result)
    main = process.thread(process.pid) if process is not None else None
    if main is not None and (phase := stack_phase(main.frames)) is not None:
        seen = phase, f"the main thread's stack of process {main.tid}"
    if seen is None and result.outcome is Outcome.CRASHED and result.signal is not None:
        # No native stack: the fatal error's dump, where the body runner is on the main thread's stack only.
        for frames in _last_fatal_dump(result.stderr_tail).values():
            if (phase := stack_phase(frames)) is not None:
                seen = phase, "the Python stacks faulthandler printed at the crash"
                break
    if seen is None or seen[0] is result.phase:
        return None
    if seen[0] is Phase.RUN and result.phase is Phase.IMPORT:
        return None  # the interpreter running code before the body: its import, as the events say
    return seen
