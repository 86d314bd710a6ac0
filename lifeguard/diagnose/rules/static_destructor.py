"""static-destructor-after-finalize: a C++ static destructor touches Python after Py_Finalize.

The onnxruntime ``OrtTorchFunctionPool`` incident: a static singleton owns
``PyObject*`` references; ``exit()`` runs its destructor after the interpreter
finalized, and ``Py_DECREF`` touches a dead interpreter (SIGSEGV in a dealloc,
or a fatal error and SIGABRT).
"""

from __future__ import annotations

from lifeguard.child.protocol import ATEXIT_DONE
from lifeguard.diagnose.crash import quote_text
from lifeguard.diagnose.evidence import (
    EXIT_HANDLER_FUNCTIONS,
    Evidence,
    blocking_call,
    caller_outside,
    describe,
    first_frame,
    thread_ref,
)
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding
from lifeguard.model.stacks import Frame

KIND = "static-destructor-after-finalize"
HINT = ("Release the Python objects and stop the threads that call into Python while the interpreter is alive: "
        "do it from an atexit hook or the module's cleanup (m_free), so the static destructor owns nothing and "
        "no thread runs Python when exit() runs it.")


# Where native code enters the interpreter (the crash site of a late callback).
PYTHON_API_FUNCTIONS = ("PyGILState_Ensure", "PyEval_RestoreThread", "PyEval_AcquireThread", "PyObject_Call",
                        "PyObject_CallObject", "PyObject_Vectorcall", "Py_DecRef", "_Py_Dealloc")


def _is_runtime(frame: Frame) -> bool:
    """libc, the loader, libstdc++ or the interpreter: not the code that owns the objects."""
    library = frame.library or ""
    return (any(part in library for part in ("libc.so", "libc-", "ld-linux", "libstdc++", "libpython"))
            or (frame.function or "").startswith(("std::", "_Py", "Py", "__")) or frame.function in ("exit",))


def _is_destructor(name: str | None) -> bool:
    return name is not None and ("::~" in name or name.startswith("~"))


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.CRASHED or evidence.phase is not Phase.EXIT:
        return []
    findings = []
    for process, thread in evidence.threads():
        found = first_frame(thread, EXIT_HANDLER_FUNCTIONS)
        if found is None:
            continue
        handler_at, handler = found
        inner = thread.frames[:handler_at]
        destructors = [f for f in inner if not f.is_python and _is_destructor(f.function)]
        # Name the object exit() destroyed (the outermost destructor, e.g. ~FunctionPool), not the
        # std::unique_ptr / std::pair members it tears down on the way.
        own = [f for f in destructors if not (f.function or "").startswith("std::")]
        candidates = own or destructors
        destructor: Frame | None = candidates[-1] if candidates else None
        if destructor is None:
            # A C library destructor (__attribute__((destructor)), an atexit(3) callback):
            # the user function exit() called, the frame just inside the handler.
            user = [f for f in inner if not f.is_python and f.function and not _is_runtime(f)]
            destructor = user[-1] if user else None
        finalized = ATEXIT_DONE in evidence.event_kinds()
        if destructor is None:
            what = "an exit handler"
        elif _is_destructor(destructor.function):
            what = f"static destructor {destructor.function}"
        else:
            what = f"exit-time function {destructor.function}"
        where = f" in {destructor.library.rsplit('/', 1)[-1]}" if destructor and destructor.library else ""
        crash = evidence.signal_name or "a fatal error"
        state = "finalized" if finalized else "shut down"
        crashed_tid = process.signal.tid if process.signal else None
        involved = [thread_ref(process, thread, "runs exit handlers")]
        other = process.thread(crashed_tid) if crashed_tid not in (None, thread.tid) else None
        if other is not None:
            # The MXNet exit case: the destructor stops a worker pool, and a worker that
            # still had a Python callback to run enters the dead interpreter.
            blocked = blocking_call(thread)
            entry = first_frame(other, PYTHON_API_FUNCTIONS)
            entry_caller = caller_outside(other, entry[0] if entry else 0, skip=PYTHON_API_FUNCTIONS)
            summary = (f"{crash} at exit: {what}{where} ran from {handler.function} after the interpreter "
                       f"{state} and is in {describe(blocked[1]) if blocked else 'a blocking call'}; thread "
                       f"{other.tid} crashed entering Python in {describe(entry[1]) if entry else 'the interpreter'}"
                       f", called from {describe(entry_caller)}")
            involved.append(thread_ref(process, other, "crashed calling into Python"))
        else:
            summary = f"{crash} at exit: {what}{where} ran from {handler.function} after the interpreter " \
                      f"{state} and touched Python objects"
        shown = [str(f) for f in inner[:8] if not f.is_python] + [str(handler)]
        said, quote = quote_text(evidence)
        summary += said
        findings.append(Finding(
            kind=KIND, summary=summary, hint=HINT,
            evidence=(f"thread {thread.tid}: {handler}",
                      *((f"stderr line {quote.line.number}: {quote.line.text.strip()}",) if quote else ())),
            threads=tuple(involved),
            frames=tuple(shown),
            details={"destructor": destructor.function if destructor else None,
                     "library": destructor.library if destructor else None,
                     "fatal_error": evidence.fatal_error},
        ))
        break
    if not findings and not evidence.processes and ATEXIT_DONE in evidence.event_kinds():
        # No native stacks (gdb missing or cores unavailable): still say what the phase means.
        findings.append(Finding(
            kind=KIND,
            summary=(f"{evidence.signal_name or 'fatal error'} after the interpreter finalized (every atexit "
                     "callback had run): native code running from exit handlers touched Python"),
            hint=HINT + " Install gdb and allow core files to see the destructor's frame.",
            details={"fatal_error": evidence.fatal_error, "confidence": "phase only"},
        ))
    return findings
