"""gc-lock-deadlock: a garbage collection waits, inside a destructor, for a lock, while another thread waits for
the collecting thread.

A service thread's allocation triggers a collection, which frees an object whose destructor takes a library's
global lock; the main thread holds that lock and joins the service thread (or waits for it otherwise). Neither
goes on. Read off the stacks alone: a blocked thread with a collection under a lock wait, and a thread that
waits for it to end.
"""

from __future__ import annotations

from lifeguard.child.protocol import GC_FOREIGN_THREAD
from lifeguard.diagnose.activity import how_blocked, is_blocked, python_text
from lifeguard.diagnose.evidence import (
    GC_FUNCTIONS,
    JOIN_FUNCTIONS,
    NATIVE_LOCK_FUNCTIONS,
    PYTHON_LOCK_FUNCTIONS,
    Evidence,
    describe,
    first_frame,
    thread_ref,
)
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding
from lifeguard.model.stacks import Frame, ThreadStack

KIND = "gc-lock-deadlock"
HINT = ("An object freed by the garbage collector takes a lock in its destructor, on whatever thread the collection "
        "runs, while the thread that holds the lock waits for that thread. Do not wait for (join) a thread while "
        "holding a lock that destructors take; free such objects explicitly where the lock is free (break the "
        "reference cycle, close() them), or keep collections off that thread (gc.freeze() / gc.disable() around its "
        "work).")
_DESTRUCTOR_FUNCTIONS = ("slot_tp_finalize", "subtype_dealloc", "PyObject_CallFinalizerFromDealloc")


def _destructor(thread: ThreadStack, lock_at: int, gc_at: int) -> Frame | None:
    """The destructor between the lock wait and the collection: its Python ``__del__`` (the Python frame the
    collection called), else the innermost native dealloc frame."""
    between = thread.frames[lock_at + 1:gc_at]
    python = next((f for f in reversed(between) if f.is_python), None)
    if python is not None:
        return python
    return next((f for f in between if not f.is_python and f.function and (
        f.function.endswith(("_dealloc", "_Dealloc", "_finalize")) or "::~" in f.function)), None)


def _frame_text(frame: Frame | None) -> str:
    if frame is not None and frame.is_python:
        return f"{frame.function} ({(frame.file or '?').rsplit('/', 1)[-1]}:{frame.line})"
    return describe(frame)


def _joins(thread: ThreadStack) -> bool:
    """Does the thread wait for another one to end (threading's join, or pthread_join / std::thread::join)?"""
    if first_frame(thread, JOIN_FUNCTIONS) is not None:
        return True
    return any(f.is_python and f.function in ("join", "_wait_for_tstate_lock")
               and (f.file or "").endswith("threading.py") for f in thread.frames)


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.HUNG:
        return []
    findings = []
    for process in evidence.processes:
        for thread in process.threads:
            gc_at = first_frame(thread, GC_FUNCTIONS)
            lock = first_frame(thread, PYTHON_LOCK_FUNCTIONS) or first_frame(thread, NATIVE_LOCK_FUNCTIONS)
            if gc_at is None or lock is None or lock[0] > gc_at[0] or not is_blocked(thread):
                continue
            destructor = _destructor(thread, lock[0], gc_at[0])
            foreign = [e for e in evidence.events if e.name == GC_FOREIGN_THREAD and e.get("thread") == thread.tid]
            name = str(foreign[0].get("thread_name")) if foreign else thread.name
            collector = f"thread {thread.tid}" + (f" ({name})" if name else "")
            where = _frame_text(destructor)
            summary = (f"deadlock: {collector} runs a garbage collection and, in a destructor ({where}), waits for a "
                       f"lock ({describe(lock[1])})")
            began = next((f for f in thread.frames[gc_at[0] + 1:] if f.is_python), None)
            if began is not None:
                summary += f"; the collection began at {_frame_text(began)}"
            involved = [thread_ref(process, thread, "collects, waits for a lock")]
            joiners = [t for t in process.threads if t.tid != thread.tid and is_blocked(t) and _joins(t)]
            if joiners:
                joiner = joiners[0]
                at = python_text(joiner)
                summary += (f"; thread {joiner.tid}" + (" (main)" if joiner.tid == process.pid else "")
                            + " waits for a thread to end" + (f" ({at})" if at else "")
                            + ": if it holds that lock, neither goes on")
                involved.append(thread_ref(process, joiner, "joins"))
            lines = [f"thread {t.tid} of {process.pid}: {how_blocked(t)}" for t in (thread, *joiners[:1])]
            if foreign:
                lines.append(f"{len(foreign)} collection(s) recorded on thread {thread.tid} (not the main thread)")
            findings.append(Finding(kind=KIND, summary=summary, hint=HINT, threads=tuple(involved),
                                    frames=tuple(str(f) for f in thread.frames[: gc_at[0] + 1] if not f.is_python),
                                    evidence=tuple(lines)))
            break
    return findings
