"""gil-held-while-blocked: a thread sleeps, reads or waits for a process while holding the GIL.

Not a deadlock by itself (nothing need wait back), but every other Python thread of the
process stops until the call returns: C code that blocks without Py_BEGIN_ALLOW_THREADS,
or a ctypes.PyDLL call.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import how_blocked, is_blocked, python_text, waits_on_io
from lifeguard.diagnose.evidence import Evidence, blocking_call, c_caller, describe, thread_ref, waits_for
from lifeguard.model.result import Finding
from lifeguard.model.stacks import GIL_HELD

KIND = "gil-held-while-blocked"
HINT = ("Release the GIL around calls that can block (Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS, "
        "pybind11's py::gil_scoped_release, Cython's 'with nogil', ctypes.CDLL rather than ctypes.PyDLL).")


def check(evidence: Evidence) -> list[Finding]:
    findings = []
    for process in evidence.hung_processes:
        for thread in process.threads:
            if thread.gil != GIL_HELD or not is_blocked(thread) or not waits_on_io(thread):
                continue
            call = blocking_call(thread)
            native = c_caller(thread, call[0]) if call else None
            entered = python_text(thread)
            waiting = [t for t in process.threads if t is not thread and waits_for(t) == "gil"]
            summary = (f"thread {thread.tid} of process {process.pid} holds the GIL while {how_blocked(thread)} "
                       f"({describe(call[1] if call else None)}, called from {describe(native)}"
                       + (f", entered from Python at {entered}" if entered else "") + ")")
            summary += (f"; {len(waiting)} other thread(s) wait for the GIL ("
                        f"{', '.join(str(t.tid) for t in waiting[:6])})" if waiting
                        else "; no other thread waits for it")
            findings.append(Finding(
                kind=KIND, summary=summary, hint=HINT,
                threads=(thread_ref(process, thread, "holds the GIL, blocked"),
                         *(thread_ref(process, t, "waits for the GIL") for t in waiting[:3])),
                frames=tuple(str(f) for f in thread.frames[:8] if not f.is_python),
                evidence=(f"thread {thread.tid}: GIL {thread.gil}, {how_blocked(thread)}",)))
    return findings
