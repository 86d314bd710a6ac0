"""fork-runtime: a forked child waits for the worker threads of a native runtime that stayed in the parent.

Seen with OpenMP (lightgbm, xgboost, faiss, scikit-learn), Rust and onnxruntime thread pools: the
parent used the pool, forked, and the child's first parallel call parks in a barrier or a futex
waiting for workers that fork() did not copy. The child sleeps forever; nothing in it is locked by
Python, so the lock and GIL rules see nothing. It fires on that shape (a forked child's thread waiting to
be signalled by a library's code, not a lock, while its parent had other threads at fork); the runtimes
table only names the runtime and its own setting. A runtime that detects the fork itself ends the child
instead (numba's GNU OpenMP layer: a message, then SIGTERM): its end, its words and the parent's threads at fork
tell that shape, and the child's stack, read while its SIGTERM was parked, says which call ended it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lifeguard.child.protocol import FORK_CHILD_EXIT
from lifeguard.diagnose.activity import (
    ForkRecord,
    fork_records,
    how_blocked,
    is_blocked,
    is_spinning,
    parent_threads_at_fork,
    python_text,
)
from lifeguard.diagnose.crash import crash_frame, where
from lifeguard.diagnose.evidence import Evidence, describe, thread_ref
from lifeguard.diagnose.messages import FORK_WORDS, library_quotes
from lifeguard.diagnose.runtimes import pool_wait_of, runtime_of
from lifeguard.model.outcomes import Phase
from lifeguard.model.result import Finding, ThreadRef, signal_name
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

KIND = "fork-runtime"


POOL_HINT = ("A thread pool or runtime started before fork() does not survive it: its worker threads stay in the "
             "parent, and the child waits for them. Use the 'spawn' or 'forkserver' start method so the child "
             "starts its own, shut the pool down before fork() (os.register_at_fork(before=...)), or start it "
             "only after the fork.")


@dataclass(frozen=True)
class _Wait:
    """What a forked child's thread waits in: a known runtime (the table names it), or by shape alone."""

    name: str  # "the GNU OpenMP runtime (libgomp)", or "libmypool.so"
    short: str  # for "N <short> worker(s)"
    hint: str
    index: int
    frame: Frame
    caller: Frame | None
    owns: Callable[[ThreadStack], bool]  # is a parent thread one of its workers


def _wait_of(thread: ThreadStack) -> _Wait | None:
    """What the thread waits in: the table's runtime, else a library's wait by shape (a spinning thread only
    when the library's own workers are found in the parent: see check)."""
    hit = runtime_of(thread)
    if hit is not None:
        runtime = hit.runtime
        return _Wait(f"{runtime.name}'s worker threads", runtime.short, runtime.hint(), hit.index, hit.frame,
                     hit.caller, lambda t: (h := runtime_of(t)) is not None and h.runtime == runtime)
    pool = pool_wait_of(thread, spinning=is_spinning(thread))
    if pool is None:
        return None
    library = pool.library
    return _Wait(f"the worker threads of a pool in {library}", library, POOL_HINT, pool.index, pool.frame,
                 pool.caller, lambda t: any((f.library or "").rsplit("/", 1)[-1] == library for f in t.frames))


def check(evidence: Evidence) -> list[Finding]:
    records = fork_records(evidence)
    findings = _ended_after_saying(evidence, records)
    for process in evidence.hung_processes:
        record = records.get(process.pid)
        if record is None and not (evidence.phase is Phase.FORK_CHILD and process.ppid in
                                   {p.pid for p in evidence.processes}):
            continue
        for thread in process.threads:
            if not (is_blocked(thread) or is_spinning(thread)):
                continue
            wait = _wait_of(thread)
            if wait is None:
                continue
            # By shape alone, the parent's threads at fork are what makes it a pool left behind; a spinning
            # thread also needs some of them in the same library (else it may only be computing).
            if runtime_of(thread) is None and not (record is not None and record.other_threads and (
                    not is_spinning(thread) or any(wait.owns(t) for t in parent_threads_at_fork(evidence, record)))):
                continue
            entered = python_text(thread)
            summary = (f"forked child {process.pid} waits for {wait.name}, which stayed in "
                       f"the parent: thread {thread.tid} is {how_blocked(thread)} in {describe(wait.frame)}, "
                       f"called from {describe(wait.caller)}" + (f", entered from Python at {entered}" if entered
                                                                 else ""))
            evidence_lines = [f"thread {thread.tid} of process {process.pid}: {how_blocked(thread)}"
                              + (f", wchan {thread.kernel.wchan}" if thread.kernel and thread.kernel.wchan else "")]
            if record is not None and record.parent_threads:
                workers = [t for t in parent_threads_at_fork(evidence, record) if wait.owns(t)]
                summary += (f"; the parent {record.parent} had {len(record.other_threads)} other thread(s) at fork "
                            f"({record.describe_threads()})")
                if workers:
                    summary += (f", {len(workers)} of them {wait.short} worker(s) "
                                f"({', '.join(str(w.tid) for w in workers[:6])})")
                summary += "; none of them exists in the child"
                evidence_lines.append(f"parent {record.parent} at fork: {len(record.parent_threads)} thread(s), "
                                      f"forking thread {record.forking_thread}")
            elif record is not None:
                summary += "; the parent's threads at fork were not recorded"
            findings.append(Finding(
                kind=KIND, summary=summary, hint=wait.hint,
                threads=(thread_ref(process, thread, f"waits in {wait.short}"),),
                frames=tuple(str(f) for f in thread.frames[: wait.index + 3] if not f.is_python),
                details={"runtime": wait.name, "pid": process.pid,
                         "library": wait.frame.library, "parent": record.parent if record else process.ppid},
                evidence=tuple(evidence_lines)))
            break  # one finding a child: its other threads wait for the same pool
    return findings


ENDED_HINT = ("A library that runs native worker threads detected that it runs in a forked child, where its workers "
              "do not exist, and ended the child. Use the 'spawn' or 'forkserver' start method, or fork before the "
              "library starts its threads (or shut them down first).")
_FORK_WORD = re.compile(FORK_WORDS, re.IGNORECASE)


def _ended_after_saying(evidence: Evidence, records: dict[int, ForkRecord]) -> list[Finding]:
    """A forked child that a library ended (a signal, an exit code) after saying something about fork, while
    the parent had native threads at fork that the child does not have: the library's own fork detection."""
    if evidence.phase is not Phase.FORK_CHILD:
        return []
    about_fork = [q for q in library_quotes(evidence.stderr_messages) if _FORK_WORD.search(q.line.text)]
    # A library's own words before a warning: CPython 3.12+ warns of any fork with threads, in the parent,
    # racing the child's message on the same stderr.
    said = next((q for q in about_fork if q.message.about != "warning"), about_fork[0] if about_fork else None)
    if said is None:
        return []
    for end in (e for e in evidence.events if e.name == FORK_CHILD_EXIT):
        child, status = end.get("child"), end.get("status")
        record = records.get(child) if isinstance(child, int) else None
        if record is None or not isinstance(status, int) or status == 0:
            continue
        native = [t for t in record.other_threads if not t.get("python")]
        if not native:
            continue
        how = f"was killed by {signal_name(-status) or -status}" if status < 0 else f"exited with code {status}"
        ender = _ended_in(evidence, child)
        site = crash_frame(ender[1]) if ender is not None else None
        raised = ""
        if ender is not None and site is not None:
            sent = ender[0].signal is not None and not ender[0].signal.is_crash
            raised = f", which it sent itself from {where(site[1])}," if sent else f" in {where(site[1])},"
        summary = (f"forked child {child} {how}{raised} after a library said: \"{said.line.text.strip()}\"; the "
                   f"parent {record.parent} had {len(native)} native thread(s) at fork "
                   f"({', '.join(str(t.get('tid')) for t in native[:6])}), which the child does not have: the "
                   "library's worker threads stayed in the parent, and it ended the child rather than run without "
                   "them")
        threads = tuple(ThreadRef(int(record.parent or 0), int(t.get("tid") or 0), t.get("comm"),
                                  "native thread at fork") for t in native[:6])
        frames: tuple[str, ...] = ()
        if ender is not None:
            threads = (thread_ref(*ender, "ended its process"), *threads)
            start = site[0] if site is not None else 0
            frames = tuple(str(f) for f in ender[1].frames[start:start + 8] if not f.is_python)
        return [Finding(kind=KIND, summary=summary, hint=ENDED_HINT, threads=threads, frames=frames,
                        details={"pid": child, "parent": record.parent, "status": status},
                        evidence=(f"stderr line {said.line.number}: {said.line.text.strip()}",
                                  f"forked child {child}: {how} (its exit status, from the kernel)",
                                  f"parent {record.parent} at fork: {len(record.parent_threads)} thread(s)"))]
    return []


def _ended_in(evidence: Evidence, pid: int) -> tuple[ProcessStacks, ThreadStack] | None:
    """The process ``pid`` and the thread its ending signal went to (a SIGTERM it sent itself, an abort), where
    its stacks were read then."""
    for process in evidence.processes:
        if process.pid == pid and process.signal is not None:
            thread = process.thread(process.signal.tid) if process.signal.tid else None
            if thread is not None:
                return process, thread
    return None
