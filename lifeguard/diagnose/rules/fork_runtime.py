"""fork-runtime: a forked child waits for the worker threads of a native runtime that stayed in the parent.

Seen with OpenMP (lightgbm, xgboost, faiss, scikit-learn), Rust and onnxruntime thread pools: the
parent used the pool, forked, and the child's first parallel call parks in a barrier or a futex
waiting for workers that fork() did not copy. The child sleeps forever; nothing in it is locked by
Python, so the lock and GIL rules see nothing.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import (
    fork_records,
    how_blocked,
    is_blocked,
    is_spinning,
    parent_threads_at_fork,
    python_text,
)
from lifeguard.diagnose.evidence import Evidence, describe, thread_ref
from lifeguard.diagnose.runtimes import runtime_of
from lifeguard.model.outcomes import Phase
from lifeguard.model.result import Finding

KIND = "fork-runtime"


def check(evidence: Evidence) -> list[Finding]:
    records = fork_records(evidence)
    findings = []
    for process in evidence.hung_processes:
        record = records.get(process.pid)
        if record is None and not (evidence.phase is Phase.FORK_CHILD and process.ppid in
                                   {p.pid for p in evidence.processes}):
            continue
        for thread in process.threads:
            if not (is_blocked(thread) or is_spinning(thread)):
                continue
            hit = runtime_of(thread)
            if hit is None:
                continue
            runtime = hit.runtime
            entered = python_text(thread)
            summary = (f"forked child {process.pid} waits for {runtime.name}'s worker threads, which stayed in "
                       f"the parent: thread {thread.tid} is {how_blocked(thread)} in {describe(hit.frame)}, "
                       f"called from {describe(hit.caller)}" + (f", entered from Python at {entered}" if entered
                                                                 else ""))
            evidence_lines = [f"thread {thread.tid} of process {process.pid}: {how_blocked(thread)}"
                              + (f", wchan {thread.kernel.wchan}" if thread.kernel and thread.kernel.wchan else "")]
            if record is not None and record.parent_threads:
                workers = [t for t in parent_threads_at_fork(evidence, record)
                           if (h := runtime_of(t)) is not None and h.runtime == runtime]
                summary += (f"; the parent {record.parent} had {len(record.other_threads)} other thread(s) at fork "
                            f"({record.describe_threads()})")
                if workers:
                    summary += (f", {len(workers)} of them {runtime.short} worker(s) "
                                f"({', '.join(str(w.tid) for w in workers[:6])})")
                summary += "; none of them exists in the child"
                evidence_lines.append(f"parent {record.parent} at fork: {len(record.parent_threads)} thread(s), "
                                      f"forking thread {record.forking_thread}")
            elif record is not None:
                summary += "; the parent's threads at fork were not recorded"
            findings.append(Finding(
                kind=KIND, summary=summary, hint=runtime.hint(),
                threads=(thread_ref(process, thread, f"waits in {runtime.short}"),),
                frames=tuple(str(f) for f in thread.frames[: hit.index + 3] if not f.is_python),
                details={"runtime": runtime.name, "pid": process.pid,
                         "library": hit.frame.library, "parent": record.parent if record else process.ppid},
                evidence=tuple(evidence_lines)))
            break  # one finding a child: its other threads wait for the same pool
    return findings
