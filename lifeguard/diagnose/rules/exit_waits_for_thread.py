"""exit-waits-for-thread: the interpreter's exit waits for a thread that never ends.

``Py_FinalizeEx`` starts by joining every non-daemon thread (``threading._shutdown``). A thread that is
still blocked (a worker waiting on a queue or an event nobody sets, a pool nobody shut down) keeps the
process alive after the program's last line: the classic CI job that prints "N passed" and then hangs.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import how_blocked, python_text
from lifeguard.diagnose.crash import main_thread
from lifeguard.diagnose.evidence import Evidence, blocking_call, c_caller, describe, thread_ref
from lifeguard.model.result import Finding
from lifeguard.model.stacks import ProcessStacks, ThreadStack

KIND = "exit-waits-for-thread"
HINT = ("Stop the thread before the program returns (set its event, put a sentinel on its queue, shut the pool "
        "down, then join it), or make it a daemon thread if it may be dropped at exit. atexit handlers run only "
        "after this join, so they cannot stop it; in a test suite, stop it in the fixture or the "
        "pytest_sessionfinish hook that started it.")


def _in_shutdown(thread: ThreadStack) -> bool:
    return any(f.is_python and f.function == "_shutdown" and (f.file or "").endswith("threading.py")
               for f in thread.frames)


def _waited_for(process: ProcessStacks, main: ThreadStack) -> list[ThreadStack]:
    """The process's other threads that run Python code: the non-daemon threads the join waits for."""
    return [t for t in process.threads if t.tid != main.tid and any(f.is_python for f in t.frames)]


def check(evidence: Evidence) -> list[Finding]:
    findings = []
    for process in evidence.hung_processes:
        main = main_thread(process)
        if main is None or not _in_shutdown(main):
            continue
        waited = _waited_for(process, main)
        if not waited:
            continue
        first = waited[0]
        call = blocking_call(first)
        native = c_caller(first, call[0]) if call else None
        where = python_text(first)
        summary = (f"process {process.pid} has finished its program and waits at exit (threading._shutdown) for "
                   f"{len(waited)} non-daemon thread(s) that never end: thread {first.tid} is {how_blocked(first)}"
                   f" in {describe(call[1] if call else None)}"
                   + (f", called from {describe(native)}" if native else "")
                   + (f", from Python at {where}" if where else ""))
        findings.append(Finding(
            kind=KIND, summary=summary, hint=HINT,
            threads=(thread_ref(process, main, "exiting"), *(thread_ref(process, t, "not ended") for t in waited)),
            frames=tuple(str(f) for f in first.frames[:8] if not f.is_python),
            evidence=(f"thread {main.tid} of {process.pid}: in threading._shutdown, joining non-daemon threads",
                      *(f"thread {t.tid} of {process.pid}: {how_blocked(t)}, {python_text(t) or 'no Python frame'}"
                        for t in waited[:4]))))
    return findings
