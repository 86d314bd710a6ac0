"""Generic findings for what no specific rule explains: where it crashed, how it hung."""

from __future__ import annotations

from lifeguard.diagnose.activity import fork_records, how_blocked, is_blocked, python_text
from lifeguard.diagnose.evidence import Evidence, blocking_call, c_caller, describe, python_location, thread_ref
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding

# Frames of the crash machinery itself, skipped to name the real crash site.
SIGNAL_FRAMES = ("faulthandler", "__restore_rt", "raise", "__pthread_kill", "pthread_kill", "abort", "gsignal",
                 "__GI_raise", "__GI_abort", "_Py_FatalErrorFunc", "fatal_error", "_Py_FatalError",
                 "Py_FatalError", "__libc_message", "__assert_fail", "__pthread_kill_implementation",
                 "__pthread_kill_internal")


def _crash_site(evidence: Evidence) -> tuple[str, str | None] | None:
    for process in evidence.processes:
        if process.signal is None:
            continue
        thread = process.thread(process.signal.tid) if process.signal.tid else None
        thread = thread or (process.threads[0] if process.threads else None)
        if thread is None:
            continue
        for frame in thread.frames:
            if frame.is_python or not frame.function or any(s in frame.function for s in SIGNAL_FRAMES):
                continue
            return describe(frame), frame.library
    return None


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is Outcome.CRASHED:
        site = _crash_site(evidence)
        how = evidence.signal_name or "fatal error"
        if site:
            library = f" in {site[1].rsplit('/', 1)[-1]}" if site[1] else ""
            summary = f"crashed with {how}{library} at {site[0]}"
        else:
            dumps = (*evidence.python_stacks.values(), evidence.stderr_tail)
            where = next((w for w in map(python_location, dumps) if w), None)
            summary = f"crashed with {how}" + (f" while running {where}" if where else "")
        if evidence.phase is not None:
            summary += f" (phase {evidence.phase.value})"
        if evidence.fatal_error:
            summary += f": {evidence.fatal_error}"
        return [Finding(kind="crash", summary=summary,
                        hint="Read the native frames of the crashing thread; run with -X dev or "
                             "PYTHONMALLOC=debug to catch the first bad write.")]
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
    main = process.threads[0]
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
    return Finding(kind="hang", summary=summary, hint=HANG_HINT, threads=(thread_ref(process, main, "main"),),
                   frames=tuple(str(f) for f in main.frames[:8] if not f.is_python),
                   evidence=tuple(f"thread {t.tid} of {p.pid}: {how_blocked(t)}" for p, t in threads[:12]))
