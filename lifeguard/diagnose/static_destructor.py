"""static-destructor-after-finalize: a C++ static destructor touches Python after Py_Finalize.

The onnxruntime ``OrtTorchFunctionPool`` incident: a static singleton owns
``PyObject*`` references; ``exit()`` runs its destructor after the interpreter
finalized, and ``Py_DECREF`` touches a dead interpreter (SIGSEGV in a dealloc,
or a fatal error and SIGABRT).
"""

from __future__ import annotations

from lifeguard.diagnose.evidence import EXIT_HANDLER_FUNCTIONS, Evidence, Finding, first_frame, thread_ref
from lifeguard.outcomes import Outcome, Phase

KIND = "static-destructor-after-finalize"
HINT = ("Release the Python objects while the interpreter is alive: unregister them from an atexit hook or the "
        "module's cleanup (m_free), so the static destructor owns nothing when exit() runs it.")


def _is_destructor(name: str | None) -> bool:
    return bool(name) and ("::~" in name or name.startswith("~"))  # type: ignore[union-attr]


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
        destructor = (own or destructors or [None])[-1]
        finalized = "atexit-done" in evidence.event_kinds()
        what = f"static destructor {destructor.function}" if destructor else "an exit handler"
        where = f" in {destructor.library.rsplit('/', 1)[-1]}" if destructor and destructor.library else ""
        crash = evidence.signal_name or "a fatal error"
        summary = (f"{crash} at exit: {what}{where} ran from {handler.function} after the interpreter "
                   f"{'finalized' if finalized else 'shut down'} and touched Python objects")
        shown = [str(f) for f in inner[:8] if not f.is_python] + [str(handler)]
        findings.append(Finding(
            kind=KIND, summary=summary, hint=HINT,
            threads=(thread_ref(process, thread, "crashed in exit handlers"),),
            frames=tuple(shown),
            details={"destructor": destructor.function if destructor else None,
                     "library": destructor.library if destructor else None,
                     "fatal_error": evidence.fatal_error},
        ))
        break
    if not findings and not evidence.processes and "atexit-done" in evidence.event_kinds():
        # No native stacks (gdb missing or cores unavailable): still say what the phase means.
        findings.append(Finding(
            kind=KIND,
            summary=(f"{evidence.signal_name or 'fatal error'} after the interpreter finalized (every atexit "
                     "callback had run): native code running from exit handlers touched Python"),
            hint=HINT + " Install gdb and allow core files to see the destructor's frame.",
            details={"fatal_error": evidence.fatal_error, "confidence": "phase only"},
        ))
    return findings
