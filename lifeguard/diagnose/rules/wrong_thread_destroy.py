"""destroyed-on-wrong-thread: an object was destroyed on a thread other than the one that owns it.

A library that ties objects to their creating thread (Tcl interpreters, Qt objects, GPU contexts) aborts,
or corrupts itself, when the object is deallocated elsewhere: typically when Python's gc, run on a
worker thread, frees it, or a worker drops the last reference.
"""

from __future__ import annotations

from lifeguard.child.protocol import GC_FOREIGN_FREED, GC_FOREIGN_THREAD
from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.crash import crash_frame, crash_of, foreign_frame, quote_text, where
from lifeguard.diagnose.evidence import GC_FUNCTIONS, Evidence, first_frame, thread_ref
from lifeguard.diagnose.rules.daemon_thread import ended_by_finalization
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding, ThreadRef
from lifeguard.model.stacks import Frame, ThreadStack

KIND = "destroyed-on-wrong-thread"
HINT = ("Let the owning thread destroy the object: drop the last reference on that thread, break reference cycles "
        "so gc never frees it elsewhere (or call gc.collect() on the owner thread), and never keep such objects "
        "in structures a worker thread may release.")
DEALLOC_FUNCTIONS = ("subtype_dealloc", "_Py_Dealloc", "Py_DecRef", "tp_dealloc", "PyObject_GC_Del")


def _dealloc_frame(thread: ThreadStack) -> Frame | None:
    """The deallocation the crashing thread is in: CPython's dealloc machinery, a type's *_dealloc, a C++
    destructor."""
    at = first_frame(thread, DEALLOC_FUNCTIONS)
    if at is not None:
        return at[1]
    return next((f for f in thread.frames
                 if (f.function or "").endswith("_dealloc") or "::~" in (f.function or "")), None)


def check(evidence: Evidence) -> list[Finding]:
    hit = crash_of(evidence)
    if hit is None and evidence.outcome is not Outcome.CRASHED:
        return []
    in_gc = hit is not None and first_frame(hit[1], GC_FUNCTIONS) is not None
    said, quote = quote_text(evidence)
    by_message = quote is not None and quote.message.about == "wrong-thread"
    freed_elsewhere = any(e.name == GC_FOREIGN_FREED for e in evidence.events)
    if any(e.name == GC_FOREIGN_THREAD for e in evidence.events) and (hit is None or in_gc
                                                                      or (by_message and freed_elsewhere)):
        return []  # a collection on a foreign thread freed it: wrong-thread-gc tells that, quoting the library
    if hit is not None and ended_by_finalization(evidence, *hit):
        return []  # its clean-up on the way out freed it: daemon-thread-at-finalization explains it
    dealloc = _dealloc_frame(hit[1]) if hit is not None else None
    # Without the library saying so: a non-main thread crashed deallocating inside a garbage collection.
    by_stack = hit is not None and dealloc is not None and in_gc and hit[1].tid != hit[0].pid
    if not (by_message or by_stack):
        return []
    summary = "an object was destroyed on a thread that does not own it"
    threads: tuple[ThreadRef, ...] = ()
    frames: tuple[str, ...] = ()
    if hit is not None:
        process, thread = hit
        summary += (f": thread {thread.tid}" + (" (the main thread)" if thread.tid == process.pid else
                                                f" ({thread.name})" if thread.name else "")
                    + (f" freed it in {where(dealloc)}" if dealloc else "")
                    + (" during a garbage collection" if in_gc else ""))
        native = foreign_frame(thread)
        if native is not None:
            summary += f", in {where(native)}"
        entered = python_text(thread)
        if entered:
            summary += f", from Python at {entered}"
        threads = (thread_ref(process, thread, "destroyed it"),)
        site = crash_frame(thread)
        frames = tuple(str(f) for f in thread.frames[(site[0] if site else 0):][:10] if not f.is_python)
    summary += said
    return [Finding(kind=KIND, summary=summary, hint=quote.message.hint if by_message and quote else HINT,
                    threads=threads, frames=frames,
                    evidence=((f"stderr line {quote.line.number}: {quote.line.text.strip()}",) if quote else ()))]
