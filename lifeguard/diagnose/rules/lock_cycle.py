"""lock-cycle: blocked threads that wait for each other through a mutex.

Read from the wait-for picture (lifeguard.diagnose.wait_for): a pthread mutex names its owner and a pthread_join
the thread it joins, in the futex words the kernel reading took; following "waits for what X holds" from
thread to thread comes back to the start. The classic lock-order inversion (A holds m1 and wants m2, B holds m2
and wants m1), a mutex locked twice by one thread, or a join of a thread that waits for a mutex the joiner holds.
Cycles through the GIL alone are gil-deadlock's; one through a destructor run by a collection, gc-lock-deadlock's.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import python_text
from lifeguard.diagnose.evidence import Evidence, blocking_call, c_caller, describe, thread_ref
from lifeguard.diagnose.wait_for import cycle, picture
from lifeguard.model.result import Finding

KIND = "lock-cycle"
HINT = ("Each thread holds what the next one waits for. Take the locks in one order everywhere (or with "
        "std::scoped_lock / std::lock over all of them at once), and never join a thread while holding a lock it "
        "may take.")


def check(evidence: Evidence) -> list[Finding]:
    waits = picture(evidence)
    loop = cycle(waits)
    if not loop or not any(w.kind == "a mutex" for w in loop) or any(w.in_gc for w in loop):
        return []
    steps = []
    for wait in loop:
        call = blocking_call(wait.thread)
        native = c_caller(wait.thread, call[0]) if call else None
        entered = python_text(wait.thread)
        holder = wait.holder.tid if wait.holder is not None else "?"
        edge = (f"joins thread {holder}" if wait.kind == "a join"
                else f"waits for {wait.kind} that thread {holder} holds")
        steps.append(f"thread {wait.thread.tid} {edge}, in {describe(native or (call[1] if call else None))}"
                     + (f" from Python at {entered}" if entered else "") + wait.context)
    process = loop[0].process
    summary = (f"deadlock in process {process.pid}: {len(loop)} thread(s) wait for each other; "
               + "; ".join(steps))
    return [Finding(kind=KIND, summary=summary, hint=HINT,
                    threads=tuple(thread_ref(w.process, w.thread, f"waits for {w.kind}") for w in loop),
                    frames=tuple(str(f) for f in loop[0].thread.frames[:8] if not f.is_python),
                    evidence=tuple(w.line() for w in loop))]
