"""out-of-memory: the kernel's out-of-memory killer ended the run (a SIGKILL lifeguard did not send, while the
kernel's count of OOM kills rose).

That is no native crash: there is no faulting frame and no core, and rerunning under gdb shows nothing. What
helps is the memory the tree was allowed, and what grew.
"""

from __future__ import annotations

import signal

from lifeguard.diagnose.evidence import Evidence
from lifeguard.model.result import Finding
from lifeguard.proc.cgroups import memory_limit

KIND = "out-of-memory"
HINT = ("The kernel killed the process for memory: not a crash in native code (no faulting frame, no core). "
        "Raise the memory the run may use (the container's or the cgroup's limit), or find what grows: run it "
        "with a smaller input, watch its RSS (/proc/PID/status VmRSS), or look for a cache or a leak that a "
        "loop fills.")


def check(evidence: Evidence) -> list[Finding]:
    if evidence.signal != signal.SIGKILL or not evidence.oom_kills:
        return []
    limit = memory_limit()
    lines = [f"the kernel's OOM killer killed {evidence.oom_kills} process(es) while the run lived "
             "(/proc/vmstat oom_kill)"]
    if limit is not None:
        lines.append(f"memory limit of lifeguard's cgroup: {limit / 2**20:,.0f} MiB")
    where = f" (phase {evidence.phase.value})" if evidence.phase is not None else ""
    summary = f"killed by SIGKILL from the kernel's out-of-memory killer{where}, not a native crash"
    return [Finding(kind=KIND, summary=summary, hint=HINT, evidence=tuple(lines))]
