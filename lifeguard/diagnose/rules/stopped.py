"""stopped: a process of the run was stopped (SIGSTOP, job control, a tracer) and cannot move.

A stopped process uses no CPU and sits in no wait: names on its stack only say where it
was when the stop came. Until something sends SIGCONT it will never finish.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import activity, python_text
from lifeguard.diagnose.evidence import Evidence, thread_ref
from lifeguard.model.kernel import Activity
from lifeguard.model.result import Finding

KIND = "stopped"
HINT = ("Something stopped the process: a SIGSTOP/SIGTSTP it sent itself or got from another process, a "
        "SIGTTIN/SIGTTOU from reading or writing a terminal in the background, or a debugger that attached and "
        "never detached. Find the sender (os.kill(..., SIGSTOP), a tty read), or send SIGCONT.")


def check(evidence: Evidence) -> list[Finding]:
    findings = []
    for process in evidence.hung_processes:
        states = [activity(t) for t in process.threads]
        if not states or any(s is not Activity.STOPPED for s in states):
            continue
        main = process.threads[0]
        where = python_text(main)
        summary = (f"process {process.pid} is stopped: all {len(states)} of its thread(s) are in state "
                   f"{main.kernel.state if main.kernel else 'T'} and used no CPU"
                   + (f"; its main thread was at {where}" if where else ""))
        findings.append(Finding(kind=KIND, summary=summary, hint=HINT,
                                threads=(thread_ref(process, main, "stopped"),),
                                evidence=tuple(f"thread {t.tid}: {t.kernel.label() if t.kernel else '?'}"
                                               for t in process.threads[:6])))
    return findings
