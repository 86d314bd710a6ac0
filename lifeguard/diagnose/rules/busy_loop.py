"""busy-loop: a hung run whose threads used CPU across the capture window: a spin, not a wait.

Said only of threads the kernel saw running (their CPU time grew between two readings); a
thread asleep in a wait the name tables do not know is blocked, never busy.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import is_spinning, python_text
from lifeguard.diagnose.evidence import Evidence, describe, thread_ref
from lifeguard.diagnose.runtimes import runtime_of
from lifeguard.model.result import Finding
from lifeguard.model.stacks import GIL_HELD, Frame, ThreadStack

KIND = "busy-loop"
HINT = ("A thread spins instead of waiting: a loop whose exit condition never comes true, or a spin-wait (a "
        "sched_yield or polling loop) for a thread or event that never arrives. Read its frames below.")
# Frames that are where a spinning thread happens to be, not what spins.
_PLUMBING = ("sched_yield", "__sched_yield", "syscall", "__GI_syscall", "clock_gettime", "__clock_gettime",
             "_PyEval_EvalFrameDefault")


def _spinning_frame(thread: ThreadStack) -> Frame | None:
    natives = [f for f in thread.frames if not f.is_python and f.function]
    return next((f for f in natives if not (f.function or "").startswith(_PLUMBING)), natives[0] if natives else None)


def check(evidence: Evidence) -> list[Finding]:
    findings = []
    for process in evidence.hung_processes:
        spinning = [t for t in process.threads if is_spinning(t)]
        if not spinning:
            continue
        parts = []
        for thread in spinning[:4]:
            frame = _spinning_frame(thread)
            entered = python_text(thread)
            hit = runtime_of(thread)
            text = f"thread {thread.tid} ({thread.kernel.label() if thread.kernel else 'running'}) in {describe(frame)}"
            if hit is not None:
                text += f" of {hit.runtime.name}"
            if entered:
                text += f", from Python at {entered}"
            if thread.gil == GIL_HELD:
                text += ", holding the GIL"
            parts.append(text)
        summary = (f"busy loop: {len(spinning)} of {len(process.threads)} thread(s) of process {process.pid} "
                   f"used CPU while the run was hung: " + "; ".join(parts))
        findings.append(Finding(kind=KIND, summary=summary, hint=HINT,
                                threads=tuple(thread_ref(process, t, "spinning") for t in spinning[:4]),
                                frames=tuple(str(f) for t in spinning[:2] for f in t.frames[:6]),
                                evidence=tuple(f"thread {t.tid}: {t.kernel.label()}" for t in spinning
                                               if t.kernel is not None)))
    return findings
