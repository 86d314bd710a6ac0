"""python-without-thread-state: a native thread called into Python without a thread state.

Case (iii) of the MXNet incident: a callback run on a thread Python did not
create, without PyGILState_Ensure first. The interpreter reads the thread
state (NULL) on its first step and crashes.
"""

from __future__ import annotations

from lifeguard.diagnose.evidence import (
    GIL_WAIT_FUNCTIONS,
    PYTHON_ENTRY_FUNCTIONS,
    PYTHON_THREAD_FUNCTIONS,
    Evidence,
    caller_outside,
    describe,
    has_frame,
    thread_ref,
)
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding

KIND = "python-without-thread-state"
HINT = ("A thread that Python did not create must register before it calls into Python: wrap the call in "
        "PyGILState_STATE s = PyGILState_Ensure(); ...; PyGILState_Release(s); (pybind11: "
        "py::gil_scoped_acquire).")


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.CRASHED:
        return []
    for process in evidence.processes:
        if process.signal is None or process.signal.tid is None or not process.signal.is_crash:
            continue
        thread = process.thread(process.signal.tid)
        if thread is None or has_frame(thread, PYTHON_THREAD_FUNCTIONS) or has_frame(thread, GIL_WAIT_FUNCTIONS):
            continue
        if has_frame(thread, ("PyGILState_Release",)):
            continue
        # The outermost interpreter entry: where native code handed control to Python.
        entries = [(i, f) for i, f in enumerate(thread.frames)
                   if not f.is_python and f.function and f.function.split("(")[0] in PYTHON_ENTRY_FUNCTIONS]
        if not entries:
            continue
        at, entry = entries[-1]
        caller = caller_outside(thread, at, skip=PYTHON_ENTRY_FUNCTIONS)
        summary = (f"{evidence.signal_name or 'crash'}: native thread {thread.tid} called into Python "
                   f"({describe(entry)}) without a thread state, from {describe(caller)}: no PyGILState_Ensure on "
                   "its stack, and Python did not create the thread")
        return [Finding(kind=KIND, summary=summary, hint=HINT,
                        threads=(thread_ref(process, thread, "calls Python without a thread state"),),
                        frames=tuple(str(f) for f in thread.frames[: at + 2] if not f.is_python))]
    return []
