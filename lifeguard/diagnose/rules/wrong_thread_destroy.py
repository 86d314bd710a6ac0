"""destroyed-on-wrong-thread: an object was destroyed on a thread other than the one that owns it.

A library that ties objects to their creating thread (Tcl interpreters, Qt objects, GPU contexts) aborts,
or corrupts itself, when the object is deallocated elsewhere: typically when Python's gc, run on a
worker thread, frees it, or a worker drops the last reference.
"""

from __future__ import annotations

from lifeguard.child.protocol import GC_FOREIGN_THREAD
from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.crash import crash_frame, crashed_thread, foreign_frame, quote_text, where
from lifeguard.diagnose.evidence import Evidence, first_frame, thread_ref
from lifeguard.diagnose.rules.wrong_thread_gc import GC_FUNCTIONS
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding, ThreadRef

KIND = "destroyed-on-wrong-thread"
HINT = ("Let the owning thread destroy the object: drop the last reference on that thread, break reference cycles "
        "so gc never frees it elsewhere (or call gc.collect() on the owner thread), and never keep such objects "
        "in structures a worker thread may release.")
DEALLOC_FUNCTIONS = ("subtype_dealloc", "_Py_Dealloc", "Py_DecRef", "tp_dealloc", "PyObject_GC_Del")


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.CRASHED:
        return []
    hit = crashed_thread(evidence)
    foreign_gc = any(e.name == GC_FOREIGN_THREAD for e in evidence.events)
    if foreign_gc and (hit is None or first_frame(hit[1], GC_FUNCTIONS) is not None):
        return []  # a collection on a foreign thread freed it: wrong-thread-gc tells that, quoting the library
    said, quote = quote_text(evidence)
    by_message = quote is not None and quote.message.about == "wrong-thread"
    dealloc = None
    on_other = False
    if hit is not None:
        process, thread = hit
        dealloc = first_frame(thread, DEALLOC_FUNCTIONS) or next(
            ((n, f) for n, f in enumerate(thread.frames) if (f.function or "").endswith("_dealloc")
             or "::~" in (f.function or "")), None)
        on_other = thread.tid != process.pid
    if not by_message and not (hit is not None and dealloc is not None and on_other
                               and (first_frame(hit[1], GC_FUNCTIONS) is not None)):
        return []
    summary = "an object was destroyed on a thread that does not own it"
    threads: tuple[ThreadRef, ...] = ()
    frames: tuple[str, ...] = ()
    if hit is not None:
        process, thread = hit
        gc = first_frame(thread, GC_FUNCTIONS)
        summary += (f": thread {thread.tid}" + (" (the main thread)" if thread.tid == process.pid else
                                                f" ({thread.name})" if thread.name else "")
                    + (f" freed it in {where(dealloc[1])}" if dealloc else "")
                    + (" during a garbage collection" if gc else ""))
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
