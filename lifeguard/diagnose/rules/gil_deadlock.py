"""gil-deadlock: the thread holding the GIL waits on a thread that waits for the GIL (a real cycle).

Seen in the MXNet incident: the forking thread holds the GIL and joins a worker;
the worker waits for the GIL in PyGILState_Ensure. Neither can move.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import is_blocked, is_spinning, waits_on_io
from lifeguard.diagnose.evidence import (
    FORK_FUNCTIONS,
    GIL_WAIT_FUNCTIONS,
    JOIN_FUNCTIONS,
    Evidence,
    blocking_call,
    caller_outside,
    describe,
    first_frame,
    first_waiting_frame,
    has_frame,
    thread_ref,
    waits_for,
)
from lifeguard.model.result import Finding
from lifeguard.model.stacks import GIL_HELD, ThreadStack

KIND = "gil-deadlock"
HINT = ("Release the GIL before blocking on another thread that may call into Python (Py_BEGIN_ALLOW_THREADS "
        "around join / wait / lock), and acquire native locks before the GIL, never the other way round.")


def waits_on_thread(thread: ThreadStack) -> bool:
    """Blocked waiting for another thread (a join, a lock, a condition, a fork's handlers), not asleep
    in a timer or I/O and not running: only then can the GIL it holds close a cycle."""
    if is_spinning(thread):
        return False
    if has_frame(thread, JOIN_FUNCTIONS) or has_frame(thread, FORK_FUNCTIONS):
        return True
    return is_blocked(thread) and not waits_on_io(thread)


def check(evidence: Evidence) -> list[Finding]:
    findings = []
    for process in evidence.hung_processes:
        if process.free_threaded:
            continue  # no GIL to close a cycle with
        # Waiting for the GIL itself (not for HEAD_LOCK inside PyGILState_Ensure: fork-deadlock explains that).
        waiters = [t for t in process.threads if waits_for(t) == "gil"]
        if not waiters:
            continue
        holders = [t for t in process.threads if t.gil == GIL_HELD and t not in waiters]
        confidence = "gil state read from the interpreter"
        if not holders:
            # The interpreter's GIL fields were unreadable: the holder is the one thread that is
            # blocked without waiting for the GIL (a thread that released it would still be in Python's
            # own waits, such as a sleep, which a join or lock wait is not).
            candidates = [t for t in process.threads if t not in waiters and first_waiting_frame(t) is not None
                          and (has_frame(t, JOIN_FUNCTIONS) or has_frame(t, FORK_FUNCTIONS))]
            if len(candidates) != 1:
                continue
            holders, confidence = candidates, "holder inferred from stacks"
        holder = holders[0]
        if not waits_on_thread(holder):
            continue  # sleeping, reading or spinning with the GIL: gil-held-while-blocked / busy-loop say so
        blocked = blocking_call(holder) or first_waiting_frame(holder)
        waiter = waiters[0]
        wait_at = first_frame(waiter, GIL_WAIT_FUNCTIONS)
        assert wait_at is not None
        ensure = first_frame(waiter, ("PyGILState_Ensure",)) or wait_at
        waiter_caller = caller_outside(waiter, ensure[0], skip=GIL_WAIT_FUNCTIONS)
        holder_caller = caller_outside(holder, blocked[0] if blocked else 0, skip=FORK_FUNCTIONS)
        how = "joins" if has_frame(holder, JOIN_FUNCTIONS) else "waits on"
        in_fork = " inside fork()" if has_frame(holder, FORK_FUNCTIONS) else ""
        summary = (f"deadlock: thread {holder.tid} holds the GIL and {how} thread {waiter.tid}"
                   f"{in_fork} ({describe(blocked[1] if blocked else None)}, from {describe(holder_caller)}); "
                   f"thread {waiter.tid} waits for the GIL in {describe(wait_at[1])}, called from "
                   f"{describe(waiter_caller)}")
        if has_frame(holder, ("__run_fork_handlers", "__run_prefork_handlers")):
            summary += "; the join runs in a pthread_atfork prepare handler"
        findings.append(Finding(
            kind=KIND, summary=summary, hint=HINT,
            threads=(thread_ref(process, holder, "holds the GIL"), thread_ref(process, waiter, "waits for the GIL")),
            frames=tuple(str(f) for f in (*holder.frames[:6], *waiter.frames[:6]) if not f.is_python),
            details={"confidence": confidence, "pid": process.pid},
        ))
    return findings
