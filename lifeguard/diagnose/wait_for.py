"""The wait-for picture of a hang: what each blocked thread waits in, and who could wake it.

Each blocked thread gets a kind of wait (the GIL, a mutex, a lock, a condition, a join, a child process, I/O, a
sleep) from its stack, and a waker where the evidence shows one: the thread holding the GIL, a pthread mutex's
owner or the thread a pthread_join waits for (both read from the futex words at capture), the child processes of
the run's tree, or nobody (the process's only thread, the parent's threads left behind at fork). Following
waker edges between threads finds cycles. Nothing here needs a library's name: only libc's and CPython's.
"""

from __future__ import annotations

from dataclasses import dataclass

from lifeguard.diagnose.activity import fork_records, how_blocked, is_blocked
from lifeguard.diagnose.evidence import (
    FINALIZE_FUNCTIONS,
    GC_FUNCTIONS,
    JOIN_FUNCTIONS,
    PYTHON_LOCK_FUNCTIONS,
    Evidence,
    has_frame,
    waits_for,
)
from lifeguard.model.stacks import GIL_HELD, ProcessStacks, ThreadStack

# Matched as evidence.matches does: libc's leading underscores do not count.
MUTEX_FUNCTIONS = ("pthread_mutex_lock", "lll_lock_wait", "GI___lll_lock_wait", "pthread_mutex_timedlock",
                   "pthread_mutex_clocklock")
CONDITION_FUNCTIONS = ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
                       "pthread_cond_wait_common", "std::condition_variable::wait")
SEMAPHORE_FUNCTIONS = ("sem_wait", "new_sem_wait_slow64", "sem_clockwait", "sem_timedwait", "do_futex_wait")
CHILD_SYSCALLS = ("wait4", "waitid")
IO_SYSCALLS = ("read", "write", "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
               "accept", "accept4", "recvfrom", "recvmsg", "connect", "sendto", "sendmsg", "io_uring_enter")
SLEEP_SYSCALLS = ("nanosleep", "clock_nanosleep")
SIGNAL_SYSCALLS = ("pause", "rt_sigsuspend", "rt_sigtimedwait")
# Waits that no thread of the process ends by releasing something: I/O, time, a signal.
OUTSIDE_KINDS = ("I/O", "time", "a signal")
MUTEX_OWNER_WORD = 2  # struct __pthread_mutex_s: __lock, __count, __owner (ints)


@dataclass(frozen=True)
class Wait:
    """One blocked thread: what it waits in and who could wake it (``holder`` when that is one thread)."""

    process: ProcessStacks
    thread: ThreadStack
    kind: str  # "the GIL", "a mutex", "a lock", "a condition", "a semaphore", "a join", "a child process", ...
    waker: str  # "thread 12 (holds it)", "nobody in this process: ...", "" when the evidence does not say
    holder: ThreadStack | None = None
    nobody: bool = False  # no thread of this process exists that could wake it
    context: str = ""  # ", inside a destructor run by the garbage collector", ", during finalization"

    @property
    def in_gc(self) -> bool:
        return self.context.startswith(IN_GC)

    def holder_wait(self, waits: list[Wait]) -> Wait | None:
        """The wait of the thread that could wake this one, when it is blocked too."""
        if self.holder is None:
            return None
        return next((w for w in waits if w.process is self.process and w.thread is self.holder), None)

    def line(self) -> str:
        text = f"thread {self.thread.tid} of {self.process.pid}: {how_blocked(self.thread)}, waits for {self.kind}"
        return text + (f" - {self.waker}" if self.waker else "") + self.context


def _kind(thread: ThreadStack) -> str:
    syscall = thread.kernel.syscall if thread.kernel is not None else None
    interpreter_wait = waits_for(thread)
    if interpreter_wait == "gil":
        return "the GIL"
    if interpreter_wait == "attach":
        return "attaching to the interpreter"
    if has_frame(thread, JOIN_FUNCTIONS):
        return "a join"
    if has_frame(thread, MUTEX_FUNCTIONS):
        return "a mutex"
    if has_frame(thread, CONDITION_FUNCTIONS):
        return "a condition"
    if has_frame(thread, PYTHON_LOCK_FUNCTIONS):
        return "a lock"
    if has_frame(thread, SEMAPHORE_FUNCTIONS):
        return "a semaphore"
    if syscall in CHILD_SYSCALLS:
        return "a child process"
    if syscall in IO_SYSCALLS:
        return f"I/O ({syscall})"
    if syscall in SLEEP_SYSCALLS:
        return f"time ({syscall})"
    if syscall in SIGNAL_SYSCALLS:
        return f"a signal ({syscall})"
    return f"a {syscall}" if syscall else "something the evidence does not name"


def _word(thread: ThreadStack, index: int) -> int | None:
    words = thread.kernel.futex_words if thread.kernel is not None else None
    return words[index] if words is not None and len(words) > index else None


def _thread(process: ProcessStacks, tid: int | None) -> ThreadStack | None:
    return next((t for t in process.threads if t.tid == tid), None) if tid else None


def _descriptor_owner(joiner: ThreadStack, others: list[ThreadStack]) -> ThreadStack | None:
    """The thread whose stack's mapping holds the word a join waits on (glibc 2.41+ waits on the joined
    thread's join state, in its descriptor at the top of that mapping, not on its tid), when exactly one does."""
    region = joiner.kernel.futex_region if joiner.kernel is not None else None
    if region is None:
        return None
    owners = [t for t in others if t.kernel is not None and t.kernel.stack_region == region]
    return owners[0] if len(owners) == 1 else None


def _name(thread: ThreadStack) -> str:
    return f"thread {thread.tid}" + (f' "{thread.name}"' if thread.name else "")


def _waker(evidence: Evidence, process: ProcessStacks, thread: ThreadStack, kind: str,
           ) -> tuple[str, ThreadStack | None, bool]:
    others = [t for t in process.threads if t.tid != thread.tid]
    if kind == "the GIL":
        holder = next((t for t in others if t.gil == GIL_HELD), None)
        if holder is not None:
            return f"{_name(holder)} holds it ({how_blocked(holder)})", holder, False
        return "", None, False
    if kind in ("a join", "a mutex"):
        tid = _word(thread, 0 if kind == "a join" else MUTEX_OWNER_WORD)
        target = _thread(process, tid)
        if kind == "a join" and target is None:
            target = _descriptor_owner(thread, others)
        if target is not None and target is not thread:
            role = "is the thread it joins" if kind == "a join" else "holds it"
            return f"{_name(target)} {role} ({how_blocked(target)})", target, False
        if kind == "a mutex" and tid == thread.tid:
            return "this thread holds it itself (a non-recursive mutex locked twice)", thread, False
    if kind == "a child process":
        children = [p.pid for p in evidence.processes if p.ppid == process.pid]
        return (f"child process(es) {', '.join(map(str, children[:6]))}" if children
                else "a child process outside the captured tree"), None, False
    if kind.startswith(OUTSIDE_KINDS):
        return "", None, False
    if not others:
        record = fork_records(evidence).get(process.pid)
        if record is not None and record.other_threads:
            return (f"nobody in this process: the threads that could were the parent's at fork "
                    f"({record.describe_threads()}), and a fork copies none of them"), None, True
        return "nobody in this process: it is its only thread", None, True
    return "", None, False


IN_GC = ", inside a destructor run by the garbage collector"


def _context(thread: ThreadStack) -> str:
    finalizing = ", during finalization" if has_frame(thread, FINALIZE_FUNCTIONS) else ""
    return (IN_GC if has_frame(thread, GC_FUNCTIONS) else "") + finalizing


def picture(evidence: Evidence) -> list[Wait]:
    """Every blocked thread of the hung processes, in the order captured."""
    waits = []
    for process in evidence.hung_processes:
        for thread in process.threads:
            if not is_blocked(thread):
                continue
            kind = _kind(thread)
            waker, holder, nobody = _waker(evidence, process, thread, kind)
            waits.append(Wait(process, thread, kind, waker, holder, nobody, _context(thread)))
    return waits


def cycle(waits: list[Wait]) -> list[Wait]:
    """The first cycle of waker edges (A waits for what B holds, B for what A holds), or []."""
    by_thread = {(w.process.pid, w.thread.tid): w for w in waits}
    for start in waits:
        path: list[Wait] = []
        seen: set[tuple[int, int]] = set()
        current: Wait | None = start
        while current is not None and current.holder is not None:
            key = (current.process.pid, current.thread.tid)
            if key in seen:
                return path[[(w.process.pid, w.thread.tid) for w in path].index(key):]
            seen.add(key)
            path.append(current)
            current = by_thread.get((current.process.pid, current.holder.tid))
    return []
