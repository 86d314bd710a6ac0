"""wrong-thread-gc: corruption or a crash while gc ran on a thread other than the main one.

The TVM Disco ``DRef`` incident: a reference cycle through a swallowed exception's
traceback delays a free until the garbage collector runs, on another thread,
whose destructor then writes to a channel the owner thread is writing to.
The child bootstrap records collections on non-main threads (gc.callbacks).
"""

from __future__ import annotations

from lifeguard.child.protocol import CORRUPTED, GC_FOREIGN_FREED, GC_FOREIGN_THREAD, MAX_FOREIGN_GC_EVENTS
from lifeguard.diagnose.crash import crashed_thread, foreign_frame, quote_text, where
from lifeguard.diagnose.evidence import GC_FUNCTIONS, Evidence, has_frame
from lifeguard.diagnose.messages import library_quotes
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding, ThreadRef

KIND = "wrong-thread-gc"
HINT = ("An object whose destructor touches state owned by one thread was freed by the garbage collector on "
        "another. Break the reference cycle that delays the free (keep no traceback/frame of a swallowed "
        "exception, pass owners explicitly instead of temporary wrappers), serialise the shared writes, or hand "
        "frees to the owner thread.")


def _crash_in_gc(evidence: Evidence) -> tuple[bool, str | None]:
    """Whether the crashing thread is itself a non-main thread collecting, and a name for it."""
    for process in evidence.processes:
        if process.signal is None or process.signal.tid is None or not process.signal.is_crash:
            continue
        thread = process.thread(process.signal.tid)
        if thread is None:
            continue
        name = f"thread {thread.tid}" + (" (main)" if thread.tid == process.pid else
                                         f" ({thread.name})" if thread.name else "")
        return thread.tid != process.pid and has_frame(thread, GC_FUNCTIONS), name
    return False, None


def _freed_in_gc(evidence: Evidence) -> str | None:
    """What the crashing collection was deallocating: the innermost dealloc frame and the library code
    its destructor ran (``Tkapp_Dealloc in _tkinter...so``, then ``Tcl_AsyncDelete in libtcl8.6.so``)."""
    hit = crashed_thread(evidence)
    if hit is None:
        return None
    _, thread = hit
    dealloc = next((f for f in thread.frames if not f.is_python and f.function
                    and (f.function.endswith(("_dealloc", "_Dealloc")) or "::~" in f.function)
                    and f.function not in ("subtype_dealloc", "_Py_Dealloc")), None)
    native = foreign_frame(thread)
    parts = [where(f) for f in (dealloc, native) if f is not None]
    return ", which ran ".join(dict.fromkeys(parts)) or None


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome not in (Outcome.CORRUPTED, Outcome.CRASHED):
        return []
    foreign = [e for e in evidence.events if e.name == GC_FOREIGN_THREAD]
    if not foreign:
        return []
    names = sorted({f"{e.get('thread_name')} ({e.get('thread')})" for e in foreign})
    corruption = next((e for e in evidence.events if e.name == CORRUPTED), None)
    what = f"corruption ({corruption.get('message')})" if corruption else (evidence.signal_name or "a crash")
    in_gc, crashed = _crash_in_gc(evidence)
    frees = [e for e in evidence.events if e.name == GC_FOREIGN_FREED]
    if corruption is None and not in_gc and not frees:
        return []  # collections that freed nothing ran no destructor there: nothing of theirs can be the cause
    if corruption is None and not in_gc and not any(q.message.about == "wrong-thread"
                                                    for q in library_quotes(evidence.stderr_messages)):
        # A free long before the crash is a cause only if something ties the two: a library that said an object
        # was used or destroyed on the wrong thread. Threads that allocate collect all the time.
        return []
    if corruption is not None or in_gc:
        summary = (f"{what} while the garbage collector ran on a non-main thread: {len(foreign)} collection(s) on "
                   f"{', '.join(names)}")
        freed = _freed_in_gc(evidence)
        if freed:
            summary += f"; the collection was freeing {freed}"
    else:
        # The free may come long before the use: what a foreign collection freed is later used by another thread.
        objects = sum(int(e.get("collected") or 0) for e in frees)
        more = "at least " if len(frees) >= MAX_FOREIGN_GC_EVENTS else ""  # the child records that many at most
        summary = (f"{more}{len(frees)} garbage collection(s) on non-main thread(s) freed {more}{objects} object(s) "
                   f"before {what}"
                   + (f" in {crashed}" if crashed else "") + f": {', '.join(names)}; objects freed there (their "
                   "destructors ran on that thread) may be what the crashing thread used")
    said, _ = quote_text(evidence)
    summary += said
    threads = {(e.pid, e.get("thread")): e.get("thread_name") for e in foreign}
    return [Finding(kind=KIND, summary=summary, hint=HINT,
                    threads=tuple(ThreadRef(int(pid or 0), int(tid or 0), name, "ran gc")
                                  for (pid, tid), name in list(threads.items())[:5]),
                    details={"collections": len(foreign), "crash_in_gc": in_gc},
                    evidence=tuple(f"gc generation {e.get('generation')} on {e.get('thread_name')} "
                                   f"(pid {e.pid})" for e in foreign[:5]))]
