"""atexit-order: a crash or hang inside an exit handler that ran after a library's own atexit callback.

atexit runs callbacks last registered first. A handler registered before a library was imported (a telemetry
flush imported early, a user's cleanup) runs after that library's own shutdown callback, and finds it torn
down: the greenlet 3.4 incident (its atexit callback marks greenlet as shut down; a later-running handler that
sleeps through gevent crashes in its hub). The child records each registration (atexit-registered events);
the stack says which handler was running.
"""

from __future__ import annotations

import sys

from lifeguard.child.protocol import ATEXIT_REGISTERED
from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.crash import cleanup_step, crash_frame, crash_of, foreign_frame, main_thread, where
from lifeguard.diagnose.evidence import Evidence, thread_ref
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

KIND = "atexit-order"
HINT = ("atexit runs callbacks last registered first: a handler registered before a library was imported runs "
        "after that library's own shutdown callback. Register the handler after importing what it uses (or call "
        "it explicitly before the program ends), or make it check that the library is still usable.")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _running_handler(thread: ThreadStack) -> Frame | None:
    """The exit handler the atexit machinery called: the outermost Python frame of the thread."""
    python = [f for f in thread.frames if f.is_python]
    return python[-1] if python else None


def _library(callback: str) -> bool:
    """A callback of a library (not the standard library's, e.g. logging.shutdown)."""
    return callback.partition(".")[0] not in _STDLIB


def _thread_in_atexit(evidence: Evidence) -> tuple[ProcessStacks, ThreadStack] | None:
    if evidence.outcome is Outcome.CRASHED:
        return crash_of(evidence)
    for process in evidence.processes:
        main = main_thread(process)
        if main is not None:
            return process, main
    return None


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome not in (Outcome.CRASHED, Outcome.HUNG) or evidence.phase is not Phase.EXIT:
        return []
    hit = _thread_in_atexit(evidence)
    if hit is None:
        return []
    process, thread = hit
    step = cleanup_step(thread)
    handler = _running_handler(thread)
    if step is None or step[0] != "an atexit callback" or handler is None:
        return []
    registered = [str(e.get("callback")) for e in evidence.events
                  if e.name == ATEXIT_REGISTERED and e.pid == process.pid]
    mine = [i for i, callback in enumerate(registered) if callback.rpartition(".")[2] == handler.function]
    if not mine:
        return []
    ran_before = [c for c in registered[mine[-1] + 1:] if _library(c)]
    if not ran_before:
        return []
    what = "crashed" if evidence.outcome is Outcome.CRASHED else "hung"
    at = f"{handler.function} ({(handler.file or '?').rsplit('/', 1)[-1]}:{handler.line})"
    summary = (f"atexit order: the exit handler {at} {what} after the atexit callback(s) registered after it had "
               f"already run: {', '.join(ran_before[-4:][::-1])} (the last registered runs first); a library's own "
               "shutdown among them leaves what the handler uses torn down")
    if evidence.outcome is Outcome.CRASHED:
        site = crash_frame(thread)
        foreign = foreign_frame(thread)
        entered = python_text(thread)
        summary += (f"; it crashed at {where(site[1] if site else None)}"
                    + (f", in {where(foreign)}" if foreign is not None and foreign is not (site and site[1]) else "")
                    + (f", from Python at {entered}" if entered else ""))
    return [Finding(kind=KIND, summary=summary, hint=HINT, threads=(thread_ref(process, thread, "in exit handler"),),
                    evidence=tuple(f"atexit callback registered #{i + 1}: {c}" for i, c in enumerate(registered[:12])))]
