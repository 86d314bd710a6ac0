"""refcount-underflow-at-finalization: a crash while the interpreter frees its static types and builtin objects.

At the very end of Py_FinalizeEx the interpreter clears builtin exception and static type objects
(_PyExc_Fini, _PyStaticType_Dealloc, finalize_interp_types). A crash there means one of them already
reached a reference count of zero, or was freed: some extension released a reference it did not own.
The extension modules that were loaded are the suspects.
"""

from __future__ import annotations

from lifeguard.child.protocol import ATEXIT_DONE
from lifeguard.diagnose.crash import cleanup_step, crash_of, quote_text, where
from lifeguard.diagnose.evidence import Evidence, first_frame, thread_ref
from lifeguard.model.outcomes import Phase
from lifeguard.model.result import Finding

KIND = "refcount-underflow-at-finalization"
HINT = ("Confirm with a debug-build interpreter or `python -X dev` (both check reference counts), or replay "
        "the run with PYTHONMALLOC=debug; then look in each suspect extension for a Py_DECREF of a borrowed "
        "reference (PyTuple_GetItem, PyDict_GetItem, PyList_GetItem, a Py_None/Py_True returned without "
        "Py_RETURN_NONE / Py_NewRef).")
FINALIZE_FUNCTIONS = ("_PyExc_Fini", "_PyStaticType_Dealloc", "finalize_interp_types", "_PyTypes_Fini",
                      "_PyBuiltins_Fini", "_PyUnicode_Fini", "_PyStaticType_ClearWeakRefs", "_PyLong_Fini",
                      "_PyTuple_Fini", "_PyFloat_Fini", "_PyDict_Fini", "_PyList_Fini")
# Late interpreter clean-up where a *dealloc* of a type or a singleton means the same thing.
LATE_CLEAR_FUNCTIONS = ("finalize_interp_clear", "interpreter_clear", "_PyInterpreterState_Clear")
SINGLETON_DEALLOCS = ("type_dealloc", "none_dealloc", "bool_dealloc", "notimplemented_dealloc",
                      "_PyStaticType_Dealloc")
MAX_SUSPECTS = 12


def suspects(evidence: Evidence, libraries: set[str]) -> list[str]:
    """Extension modules loaded at exit (the child's record), else the extension libraries on the stacks."""
    recorded = [str(name) for e in evidence.events if e.name == ATEXIT_DONE for name in e.get("extensions") or ()]
    names = recorded or sorted(lib.rsplit("/", 1)[-1] for lib in libraries if ".cpython-" in lib or "abi3" in lib)
    return sorted(set(names))


def check(evidence: Evidence) -> list[Finding]:
    hit = crash_of(evidence)
    if hit is None:
        return []
    process, thread = hit
    at = first_frame(thread, FINALIZE_FUNCTIONS)
    if at is None and first_frame(thread, LATE_CLEAR_FUNCTIONS) is not None:
        at = first_frame(thread, SINGLETON_DEALLOCS)
    said, quote = quote_text(evidence)
    by_message = quote is not None and quote.message.about == "refcount"
    if at is None and not by_message:
        return []
    libraries = {f.library for p in evidence.processes for t in p.threads for f in t.frames if f.library}
    named = suspects(evidence, libraries)
    if at is not None:
        summary = (f"crashed in {where(at[1])} while Py_FinalizeEx freed the interpreter's static types and "
                   f"builtin objects: one of them had already been released (its reference count reached zero "
                   f"early), so an extension released a reference it did not own")
    else:
        when = " at finalization" if evidence.phase is Phase.EXIT else ""
        summary = (f"reference count underflow{when}: CPython found an object freed that must never be (or a "
                   f"negative reference count) while thread {thread.tid} released it")
        step = cleanup_step(thread)
        if step is not None:
            summary += f" in {step[0]} ({where(step[1])})"
    if named:
        shown = ", ".join(named[:MAX_SUSPECTS]) + (f" and {len(named) - MAX_SUSPECTS} more"
                                                   if len(named) > MAX_SUSPECTS else "")
        summary += f"; extension modules loaded: {shown}"
    summary += said
    return [Finding(kind=KIND, summary=summary, hint=HINT, threads=(thread_ref(process, thread, "crashed"),),
                    frames=tuple(str(f) for f in thread.frames[(at[0] if at else 0):][:8] if not f.is_python),
                    details={"suspects": named[:50]},
                    evidence=(f"thread {thread.tid}: {at[1] if at else thread.frames[0] if thread.frames else '?'}",
                              *((f"stderr line {quote.line.number}: {quote.line.text.strip()}",) if quote else ())))]
