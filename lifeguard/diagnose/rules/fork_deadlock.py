"""fork-deadlock: a thread stuck inside fork(), or a forked child on an inherited lock.

The MXNet ``CustomOperator`` incident: a ``pthread_atfork`` prepare handler joins
workers that call back into Python while the forking thread holds the GIL. And
the classic: a child forked while another thread held a lock waits forever for it.
"""

from __future__ import annotations

from lifeguard.diagnose.activity import (
    ForkRecord,
    fork_records,
    how_blocked,
    is_blocked,
    parent_threads_at_fork,
    python_text,
)
from lifeguard.diagnose.evidence import (
    FORK_FUNCTIONS,
    GIL_WAIT_FUNCTIONS,
    NATIVE_LOCK_FUNCTIONS,
    PYTHON_LOCK_FUNCTIONS,
    Evidence,
    blocking_call,
    c_caller,
    caller_outside,
    describe,
    first_frame,
    has_frame,
    in_libc,
    thread_ref,
    waits_for,
)
from lifeguard.diagnose.runtimes import runtime_of
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Finding, ThreadRef
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

KIND = "fork-deadlock"
HINT_PREPARE = ("Do not block on other threads in a pthread_atfork prepare handler while they may need the GIL: "
                "release the GIL around the stop/join (Py_BEGIN_ALLOW_THREADS), or stop the workers before "
                "os.fork() and restart them in the child.")
HINT_RUNTIME_LOCK = ("Stop the threads that may call into Python before fork() starts, from "
                     "os.register_at_fork(before=...) while only the GIL is held: since CPython 3.13 "
                     "os.fork() also holds the runtime's thread-state lock, so releasing the GIL around the join "
                     "in a pthread_atfork handler is not enough.")
# A free-threaded interpreter with its GIL off: os.fork() stops the world and holds the runtime's lock instead.
HINT_PREPARE_FREE_THREADED = (
    "Do not block on other threads in a pthread_atfork prepare handler while they may call into Python: os.fork() "
    "pauses every thread that runs Python (a stop-the-world pause) and holds the runtime's thread-state lock "
    "across fork(). Stop the workers before os.fork() (os.register_at_fork(before=...)) and restart them in the "
    "child.")
HINT_RUNTIME_LOCK_FREE_THREADED = (
    "Stop the threads that may call into Python before fork() starts, from os.register_at_fork(before=...): "
    "os.fork() holds the runtime's thread-state lock across fork() (CPython 3.13+), so a pthread_atfork handler "
    "that waits for a thread that is creating its thread state waits forever.")
HINT_CHILD = ("A forked child inherits locks held by threads that do not exist in it. Fork before starting "
              "threads, use the 'spawn'/'forkserver' start method, or reset the lock with os.register_at_fork.")


def check(evidence: Evidence) -> list[Finding]:
    if evidence.outcome is not Outcome.HUNG:
        return []
    findings: list[Finding] = []
    records = fork_records(evidence)
    for process, thread in evidence.threads():
        fork_at = first_frame(thread, FORK_FUNCTIONS)
        if fork_at is None:
            continue
        blocked = blocking_call(thread)
        waits = describe(blocked[1]) if blocked else "a blocking call"
        caller = caller_outside(thread, blocked[0] if blocked else 0, skip=FORK_FUNCTIONS)
        in_handler = _in_atfork_handler(thread, fork_at[0])
        involved = [thread_ref(process, thread, "forking")]
        free = process.free_threaded
        hint = HINT_PREPARE_FREE_THREADED if free else HINT_PREPARE
        others = [(t, waits_for(t)) for t in process.threads if t.tid != thread.tid]
        blocked_others = [(t, kind) for t, kind in others if kind is not None]
        detail = ""
        if blocked_others:
            other, kind = blocked_others[0]
            waited = {"gil": "the GIL", "attach": "the stop-the-world pause"}.get(kind or "", "HEAD_LOCK")
            involved.append(thread_ref(process, other, f"waits for {waited}"))
            entry = first_frame(other, ("PyGILState_Ensure",)) or first_frame(other, GIL_WAIT_FUNCTIONS)
            other_caller = caller_outside(other, entry[0] if entry else 0, skip=GIL_WAIT_FUNCTIONS)
            if kind == "gil":
                detail = (f"; thread {other.tid} waits for the GIL the forking thread holds "
                          f"({describe(entry[1]) if entry else 'take_gil'}, called from {describe(other_caller)})")
            elif kind == "attach":
                detail = (f"; thread {other.tid} waits to attach to the interpreter "
                          f"({describe(entry[1]) if entry else 'PyGILState_Ensure'}, called from "
                          f"{describe(other_caller)}), which the forking thread's stop-the-world pause holds off")
            else:
                detail = (f"; thread {other.tid} waits in PyGILState_Ensure -> new_threadstate for the "
                          f"runtime's thread-state lock (HEAD_LOCK), which os.fork() holds across fork() "
                          f"(CPython 3.13+), called from {describe(other_caller)}")
                hint = HINT_RUNTIME_LOCK_FREE_THREADED if free else HINT_RUNTIME_LOCK
        summary = (f"deadlock in fork: thread {thread.tid} of process {process.pid} is inside fork() and blocks "
                   f"in {waits}, called from {describe(caller)}{in_handler}{detail}")
        seen = [f"thread {thread.tid} of process {process.pid}: {how_blocked(thread)}, inside "
                f"{describe(fork_at[1])}" + (" in a pthread_atfork handler's code" if in_handler else "")]
        if blocked_others and (waiting := first_frame(blocked_others[0][0], GIL_WAIT_FUNCTIONS)) is not None:
            seen.append(f"thread {blocked_others[0][0].tid}: {how_blocked(blocked_others[0][0])}, in "
                        f"{describe(waiting[1])}")
        findings.append(Finding(kind=KIND, summary=summary, hint=hint, threads=tuple(involved),
                                frames=tuple(str(f) for f in thread.frames[: fork_at[0] + 1] if not f.is_python),
                                evidence=tuple(seen)))
    for process in evidence.processes:
        record = records.get(process.pid)
        if record is None:
            continue
        for thread in process.threads:
            if runtime_of(thread) is not None:
                continue  # a pool that stayed in the parent: fork-runtime explains it
            # Name the lock at the highest level that shows it: Python's lock before libc's futex.
            lock = first_frame(thread, PYTHON_LOCK_FUNCTIONS) or first_frame(thread, NATIVE_LOCK_FUNCTIONS)
            if lock is None or not (is_blocked(thread) or thread.kernel is None):
                continue
            findings.append(_inherited_lock(evidence, process, thread, lock[0], lock[1], record))
            break
    if not findings and not evidence.processes:
        # Without native stacks: a forked child's faulthandler dump stuck on a lock.
        for pid, dump in evidence.python_stacks.items():
            if int(pid) in records and (".acquire" in dump or "__enter__" in dump):
                findings.append(Finding(
                    kind=KIND, summary=f"forked child {pid} is blocked acquiring a lock (Python stack)",
                    hint=HINT_CHILD, details={"confidence": "python stack only"}))
    return findings


def _in_atfork_handler(thread: ThreadStack, fork_index: int) -> str:
    """Where in fork() the thread blocks: " in a pthread_atfork prepare handler" when glibc's handler runner is
    named; " in a pthread_atfork handler" when only its shape shows (inside fork() libc calls no code of anyone
    else but pthread_atfork handlers, and without libc's debug symbols the runner is "??"); "" when neither."""
    if has_frame(thread, ("__run_fork_handlers", "__run_prefork_handlers")):
        return " in a pthread_atfork prepare handler"
    if any(not f.is_python and f.library and not f.in_interpreter and not in_libc(f)
           for f in thread.frames[:fork_index]):
        return " in a pthread_atfork handler"
    return ""


def _inherited_lock(evidence: Evidence, process: ProcessStacks, thread: ThreadStack, at: int, lock: Frame,
                    record: ForkRecord) -> Finding:
    """A forked child blocked on a lock: the C code that takes it, the Python line, and the parent's
    thread that held it at fork where the parent's stacks show one in the same C code."""
    native = c_caller(thread, at)
    entered = python_text(thread)
    origin = f", from Python at {entered}" if entered else f", called from {describe(caller_outside(thread, at))}"
    summary = (f"forked child {process.pid} is blocked on a lock inherited from its parent: thread {thread.tid} "
               f"is {how_blocked(thread)} in {describe(lock)}, taken by "
               + (describe(native) if native is not None else "Python code (a threading lock)")
               + origin)
    involved = [thread_ref(process, thread, "blocked in forked child")]
    lines = [f"thread {thread.tid} of process {process.pid}: {how_blocked(thread)}"]
    holders = [t for t in parent_threads_at_fork(evidence, record)
               if native is not None and native.function and any(f.function == native.function for f in t.frames)]
    if holders:
        holder = holders[0]
        where = python_text(holder)
        summary += (f"; parent thread {holder.tid} ({holder.name or '?'}), which existed at fork, is in the same "
                    f"code ({describe(native)}" + (f", from {where}" if where else "") + "): it held the lock "
                    "when the parent forked")
        involved.append(ThreadRef(record.parent or 0, holder.tid, holder.name, "held the lock at fork"))
    elif record.other_threads:
        summary += (f"; the parent {record.parent} had {len(record.other_threads)} other thread(s) at fork "
                    f"({record.describe_threads()}): one of them held it")
    if record.parent_threads:
        lines.append(f"parent {record.parent} at fork: {len(record.parent_threads)} thread(s), "
                     f"forking thread {record.forking_thread}")
    return Finding(kind=KIND, summary=summary, hint=HINT_CHILD, threads=tuple(involved),
                   frames=tuple(str(f) for f in thread.frames[:12]), evidence=tuple(lines))
