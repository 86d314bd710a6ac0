"""Generic findings for what no specific rule explains: where it crashed, how it hung."""

from __future__ import annotations

from lifeguard.diagnose.activity import fork_records, how_blocked, is_blocked, python_text
from lifeguard.diagnose.crash import cleanup_step, crash_frame, crashed_thread, main_thread, quote_text, where
from lifeguard.diagnose.evidence import Evidence, blocking_call, c_caller, describe, python_location, thread_ref
from lifeguard.diagnose.wait_for import OUTSIDE_KINDS, picture
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding, ThreadRef


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is Outcome.CRASHED:
        return [_crash(evidence)]
    if evidence.outcome is Outcome.HUNG:
        threads = evidence.threads()
        if threads:
            return [_hang(evidence)]
        places = [p for p in (python_location(d) for d in evidence.python_stacks.values()) if p]
        summary = "hung" + (f" in {', '.join(places)}" if places else "")
        return [Finding(kind="hang", summary=summary + " (Python stacks only)",
                        hint=HANG_HINT)]
    if evidence.outcome is Outcome.CORRUPTED:
        return [Finding(kind="corruption", summary="the scenario reported broken data",
                        hint="Look for two threads writing to the same buffer, channel or object.")]
    return []


HANG_HINT = "Look for a thread waiting on another that waits back (locks, join, the GIL)."


def _hang(evidence: Evidence) -> Finding:
    """Every thread's kernel state counted, and where the most relevant process's main thread waits."""
    threads = evidence.threads()
    blocked = [(p, t) for p, t in threads if is_blocked(t)]
    forked = fork_records(evidence)
    # The deepest forked child is where a tree's hang usually starts; its parents wait for it.
    process = next((p for p in reversed(evidence.processes) if p.pid in forked and p.threads),
                   next((p for p in evidence.processes if p.threads), evidence.processes[0]))
    main = main_thread(process) or process.threads[0]  # the thread whose id is the pid: back ends list in any order
    if len(blocked) == len(threads):
        summary = (f"hung with every thread blocked: {len(threads)} thread(s) in {len(evidence.processes)} "
                   f"process(es), none running")
    else:
        summary = (f"hung: {len(blocked)} of {len(threads)} thread(s) blocked, the others' state unknown "
                   "(no kernel reading)")
    call = blocking_call(main)
    where = python_text(main)
    native = c_caller(main, call[0]) if call else None
    summary += (f"; process {process.pid}'s main thread {main.tid} is {how_blocked(main)} in "
                f"{describe(call[1] if call else None)}" + (f", called from {describe(native)}" if native else "")
                + (f", from Python at {where}" if where else ""))
    waits = picture(evidence)
    main_wait = next((w for w in waits if w.process is process and w.thread is main), None)
    if main_wait is not None and main_wait.waker:
        summary += f"; it waits for {main_wait.kind}{main_wait.context}: {main_wait.waker}"
    joined = main_wait.holder_wait(waits) if main_wait is not None and main_wait.kind == "a join" else None
    if joined is not None:
        summary += f", which itself waits for {joined.kind}" + (f": {joined.waker}" if joined.waker else "")
    alone = next((w for w in waits if w.nobody), None)
    if alone is not None:
        hint = (f"Nothing in process {alone.process.pid} can wake thread {alone.thread.tid}: find who was meant to "
                "signal what it waits for, and why that thread is not there.")
    elif joined is not None and joined.kind.startswith(OUTSIDE_KINDS):
        hint = (f"The thread being joined is not ending: it waits for {joined.kind}. Tell it to stop (close what it "
                "reads or polls, set its stop flag, send what it waits for) before joining it.")
    else:
        hint = HANG_HINT
    described = {(w.process.pid, w.thread.tid): w.line() for w in waits}
    return Finding(kind="hang", summary=summary, hint=hint, threads=(thread_ref(process, main, "main"),),
                   frames=tuple(str(f) for f in main.frames[:8] if not f.is_python),
                   evidence=tuple(described.get((p.pid, t.tid), f"thread {t.tid} of {p.pid}: {how_blocked(t)}")
                                  for p, t in threads[:12]))


CRASH_HINT = ("Read the native frames of the crashing thread; run with -X dev or PYTHONMALLOC=debug to catch the "
              "first bad write.")


def _crash(evidence: Evidence) -> Finding:
    """Where it crashed (the first frame under the signal plumbing), how (the real fault address, never a
    sender's pid) and what the library said."""
    how = evidence.signal_name or "fatal error"
    hit = crashed_thread(evidence)
    threads: tuple[ThreadRef, ...] = ()
    frames: tuple[str, ...] = ()
    lines = []
    if hit is not None:
        process, thread = hit
        site = crash_frame(thread)
        signal = process.signal
        if signal is not None and signal.fault_address:
            how += f" at address {signal.fault_address}"
        summary = f"crashed with {how} in thread {thread.tid} at {where(site[1] if site else None)}"
        entered = python_text(thread)
        if entered:
            summary += f", from Python at {entered}"
        step = cleanup_step(thread) if evidence.phase is Phase.EXIT else None
        if step is not None:
            summary += f", during {step[0]} ({where(step[1])})"
        threads = (thread_ref(process, thread, "crashed"),)
        frames = tuple(str(f) for f in thread.frames[(site[0] if site else 0):][:8] if not f.is_python)
        lines.append(f"process {process.pid} killed by {signal}" if signal else f"process {process.pid}")
    else:
        dumps = (*evidence.python_stacks.values(), evidence.stderr_tail)
        at = next((w for w in map(python_location, dumps) if w), None)
        summary = f"crashed with {how}" + (f" while running {at}" if at else "")
    if evidence.phase is not None:
        summary += f" (phase {evidence.phase.value})"
    said, quote = quote_text(evidence)
    summary += said
    hint = quote.message.hint if quote is not None and quote.message.hint else CRASH_HINT
    if quote is not None:
        lines.append(f"stderr line {quote.line.number}: {quote.line.text.strip()}")
    return Finding(kind="crash", summary=summary, hint=hint, threads=threads, frames=frames, evidence=tuple(lines))
