"""thread-running-at-exit: at a crash during shutdown, other threads were still running native or Python code.

The interpreter's shutdown (atexit callbacks, module finalization, static destructors) frees what those
threads still use: a native worker whose object an atexit cleanup destroyed, a Python thread still in a
library call when the module it runs was cleared. The crash is the thread or the cleanup touching
freed state.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.crash import cleanup_step, crashed_thread, foreign_frame, main_thread, quote_text, where
from lifeguard.diagnose.evidence import EXIT_HANDLER_FUNCTIONS, Evidence, has_frame, thread_ref
from lifeguard.diagnose.rules.daemon_thread import ended_by_finalization
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding
from lifeguard.model.stacks import ThreadStack

KIND = "thread-running-at-exit"
HINT = ("Stop every thread that uses an object before the object is destroyed: join native workers and Python "
        "threads in an atexit handler registered after the object is created (atexit runs in reverse order), "
        "or in the module's cleanup, before the library's own cleanup runs.")


def _running(thread: ThreadStack) -> str | None:
    """What a live thread runs, in a few words: its library code, its Python line; None for an idle
    interpreter thread with nothing of its own on the stack."""
    native = foreign_frame(thread)
    entered = python_text(thread)
    if native is None and entered is None:
        return None
    parts = [where(native)] if native is not None else []
    if entered:
        parts.append(f"from Python at {entered}")
    return ", ".join(parts)


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.CRASHED or evidence.phase is not Phase.EXIT:
        return []
    hit = crashed_thread(evidence)
    if hit is None:
        return []
    process, crashed = hit
    if ended_by_finalization(evidence, process, crashed):
        return []  # a daemon thread ended by finalization: daemon-thread-at-finalization explains it
    main = main_thread(process)
    if has_frame(crashed, EXIT_HANDLER_FUNCTIONS) or (main is not None and has_frame(main, EXIT_HANDLER_FUNCTIONS)):
        return []  # after Py_Finalize, in exit()'s handlers: static-destructor-after-finalize's ground
    main_tid = main.tid if main is not None else process.pid
    running = [(t, what) for t in process.threads if t.tid != main_tid if (what := _running(t)) is not None]
    if not running:
        return []
    step = cleanup_step(main) if main is not None else None
    if crashed.tid != main_tid:
        # The crashing thread is itself the one that kept running into the shutdown.
        summary = (f"thread {crashed.tid}" + (f" ({crashed.name})" if crashed.name else "")
                   + f" was still running at exit and crashed in {where(foreign_frame(crashed))}")
        if step is not None:
            summary += f" while the main thread ran {step[0]} ({where(step[1])})"
        summary += ": the shutdown freed what it was using"
        others = [(t, what) for t, what in running if t.tid != crashed.tid]
    else:
        summary = ("crashed at exit in the main thread"
                   + (f", in {step[0]} ({where(step[1])})" if step is not None else "")
                   + f", while {len(running)} other thread(s) still ran")
        others = running
    if others:
        summary += "; still running: " + "; ".join(f"thread {t.tid}" + (f" ({t.name})" if t.name else "")
                                                  + f" in {what}" for t, what in others[:4])
    said, quote = quote_text(evidence)
    summary += said
    return [Finding(kind=KIND, summary=summary, hint=HINT,
                    threads=(thread_ref(process, crashed, "crashed"),
                             *(thread_ref(process, t, "still running") for t, _ in others[:4])),
                    frames=tuple(str(f) for f in crashed.frames[:8] if not f.is_python),
                    evidence=(f"thread {crashed.tid} crashed: {crashed.frames[0] if crashed.frames else '?'}",
                              *(f"thread {t.tid}: {what}" for t, what in others[:6]),
                              *((f"stderr line {quote.line.number}: {quote.line.text.strip()}",) if quote else ())))]
