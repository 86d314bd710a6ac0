"""daemon-thread-at-finalization: a daemon thread ended by the interpreter's shutdown while in native code.

When the main thread finalizes, a daemon thread that next asks for the GIL is ended where it stands:
CPython calls PyThread_exit_thread -> pthread_exit, whose forced unwinding runs through the native
frames above it. A C++ frame that is noexcept (a callback loop, a destructor) turns that unwinding
into std::terminate ("terminate called without an active exception") and abort().
"""

from __future__ import annotations

import re

from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.crash import cleanup_step, crash_of, foreign_frame, main_thread, quote_text, where
from lifeguard.diagnose.evidence import FINALIZE_FUNCTIONS, Evidence, first_frame, has_frame, thread_ref
from lifeguard.model.result import Finding
from lifeguard.model.stacks import ProcessStacks, ThreadStack

KIND = "daemon-thread-at-finalization"
HINT = ("Stop and join the thread before the interpreter exits (an atexit handler that signals it and joins it, "
        "or a non-daemon thread the program joins), so finalization never ends it inside native code; a binding "
        "can also make the thread check Py_IsFinalizing() before taking the GIL.")
# A free-threaded interpreter without its GIL ends the thread as it attaches its thread state instead.
HINT_FREE_THREADED = HINT.replace("before taking the GIL", "before attaching to the interpreter (PyGILState_Ensure)")
THREAD_EXIT_FUNCTIONS = ("PyThread_exit_thread", "pthread_exit", "__pthread_exit", "__do_cancel", "__pthread_unwind",
                         "_Unwind_ForcedUnwind")


# A Python thread's own start, below its frames (CPython's thread module).
PYTHON_THREAD_START = ("thread_run", "pythread_wrapper", "t_bootstrap")
# CPython's words when a thread calls the C API without a thread state: what a thread that finalization ended
# does when the unwinding runs its native clean-up (or its call returns) and releases Python objects.
NO_THREAD_STATE = re.compile(r"PyThreadState_Get|thread state is NULL|GIL is released|must be called with the GIL")


def ended_by_finalization(evidence: Evidence, process: ProcessStacks, thread: ThreadStack) -> bool:
    """Whether a crashed thread is a Python thread that the interpreter's finalization ended: its stack still
    shows PyThread_exit_thread or pthread_exit, or, once the forced unwinding has left those frames behind (it
    runs the native clean-up in the frames it unwinds), it is a thread started from Python that failed for want
    of a thread state while the main thread finalized."""
    main = main_thread(process)
    if main is None or main.tid == thread.tid:
        return False
    if has_frame(thread, THREAD_EXIT_FUNCTIONS):
        return True
    return (has_frame(thread, PYTHON_THREAD_START) and has_frame(main, FINALIZE_FUNCTIONS)
            and NO_THREAD_STATE.search(evidence.fatal_error or "") is not None)


def check(evidence: Evidence) -> list[Finding]:
    hit = crash_of(evidence)
    if hit is None:
        return []
    process, thread = hit
    if not ended_by_finalization(evidence, process, thread) or (main := main_thread(process)) is None:
        return []
    exit_at = first_frame(thread, THREAD_EXIT_FUNCTIONS)
    native = foreign_frame(thread, exit_at[0] + 1 if exit_at else 0)
    entered = python_text(thread)
    forced = first_frame(thread, ("_Unwind_ForcedUnwind", "__gxx_personality_v0", "std::terminate"))
    summary = f"daemon thread {thread.tid}" + (f" ({thread.name})" if thread.name else "")
    if exit_at is not None:
        summary += (f" was ended by the interpreter's shutdown (PyThread_exit_thread -> pthread_exit) while running "
                    f"{where(native)}" + (f", started from Python at {entered}" if entered else ""))
    else:
        summary += (f" was in native code, {where(native)}" + (f", called from Python at {entered}," if entered else "")
                    + " when the interpreter finalized: a thread that "
                    + ("attaches to the interpreter" if process.free_threaded else "asks for the GIL")
                    + " then is ended (PyThread_exit_thread -> pthread_exit), and the native clean-up run on its "
                    "way out released Python objects without a thread state")
    if forced is not None:
        summary += "; the forced unwinding went through native frames that do not allow it, and the process aborted"
    step = cleanup_step(main)
    if step is not None:
        summary += f"; the main thread was in {step[0]} ({where(step[1])})"
    said, quote = quote_text(evidence)
    summary += said
    lines = [f"thread {thread.tid}: {str(exit_at[1]) if exit_at else where(native)}"]
    if quote is not None:
        lines.append(f"stderr line {quote.line.number}: {quote.line.text.strip()}")
    return [Finding(kind=KIND, summary=summary, hint=HINT_FREE_THREADED if process.free_threaded else HINT,
                    threads=(thread_ref(process, thread, "daemon thread ended at shutdown"),
                             thread_ref(process, main, "finalizing")),
                    frames=tuple(str(f) for f in thread.frames[exit_at[0] if exit_at else 0:][:6 if exit_at else 12]
                                 if not f.is_python),
                    details={"library": native.library if native else None}, evidence=tuple(lines))]
