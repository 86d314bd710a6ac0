"""What each thread was doing (from the kernel), where Python entered native code, and what the
parent had at fork: the facts the hang rules share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifeguard.child.protocol import FORKED
from lifeguard.diagnose.evidence import Evidence, is_waiting, matches
from lifeguard.model.kernel import Activity
from lifeguard.model.result import Event
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack, is_user_file

# Native waits that are I/O or sleep, not synchronisation with another thread.
IO_WAIT_FUNCTIONS = ("nanosleep", "clock_nanosleep", "__clock_nanosleep", "sleep", "usleep", "read", "__libc_read",
                     "poll", "__poll", "ppoll", "select", "__select", "pselect", "epoll_wait", "wait4", "__wait4",
                     "waitpid", "__waitpid", "accept", "accept4", "recv", "recvfrom", "recvmsg", "pause",
                     "sigwait", "sigtimedwait", "write", "__libc_write", "connect")
IO_SYSCALLS = ("read", "write", "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
               "nanosleep", "clock_nanosleep", "wait4", "waitid", "accept", "accept4", "recvfrom", "recvmsg",
               "pause", "rt_sigsuspend", "rt_sigtimedwait", "connect", "sendto", "sendmsg", "flock", "fcntl")


def activity(thread: ThreadStack) -> Activity | None:
    return thread.kernel.activity if thread.kernel is not None else None


def is_blocked(thread: ThreadStack) -> bool:
    """Asleep in the kernel. Without a kernel reading (older evidence), a known wait function near
    the top of the stack stands in."""
    state = activity(thread)
    if state is not None:
        return state is Activity.BLOCKED
    return any(is_waiting(f) for f in thread.frames[:6])


def is_spinning(thread: ThreadStack) -> bool:
    return activity(thread) is Activity.SPINNING


def waits_on_io(thread: ThreadStack) -> bool:
    """Blocked in a sleep, a read, a poll or a child wait: not waiting for another thread."""
    if thread.kernel is not None and thread.kernel.syscall is not None:
        return thread.kernel.syscall in IO_SYSCALLS
    top = next((f for f in thread.frames if not f.is_python and f.function), None)
    return top is not None and matches(top.function, IO_WAIT_FUNCTIONS)


def how_blocked(thread: ThreadStack) -> str:
    """``blocked in futex``, ``spinning (98% CPU)``: the kernel's word, or the stack's when it has none."""
    if thread.kernel is not None:
        return thread.kernel.label()
    return "blocked" if is_blocked(thread) else "state unknown"


def python_entry(thread: ThreadStack) -> tuple[Frame | None, Frame | None]:
    """The innermost Python frame (where Python called into native code) and the innermost frame of
    the user's own code (not the standard library, not site-packages), either None when absent."""
    python = [f for f in thread.frames if f.is_python and not f.is_harness and f.file != "<string>"]
    innermost = python[0] if python else None
    user = next((f for f in python if is_user_file(f.file)), None)
    return innermost, user


def python_text(thread: ThreadStack) -> str | None:
    """``train (engine.py:311), from bug.py:24``: where Python entered the native code."""
    innermost, user = python_entry(thread)
    if innermost is None:
        return None
    text = f"{innermost.function} ({(innermost.file or '?').rsplit('/', 1)[-1]}:{innermost.line})"
    if user is not None and user is not innermost:
        text += f", from {(user.file or '?').rsplit('/', 1)[-1]}:{user.line}"
    return text


@dataclass(frozen=True)
class ForkRecord:
    """What a forked child's bootstrap recorded: its parent and the parent's threads at fork."""

    child: int
    parent: int | None
    forking_thread: int | None
    parent_threads: tuple[dict[str, Any], ...]  # {"tid", "comm", "python"} each

    @classmethod
    def of(cls, event: Event) -> ForkRecord:
        threads = event.get("parent_threads") or ()
        return cls(int(event.pid or 0), event.get("parent"), event.get("forking_thread"),
                   tuple(t for t in threads if isinstance(t, dict)))

    @property
    def other_threads(self) -> tuple[dict[str, Any], ...]:
        """The parent's threads at fork except the one that forked: none of them exists in the child."""
        return tuple(t for t in self.parent_threads if t.get("tid") != self.forking_thread)

    def describe_threads(self, limit: int = 6) -> str:
        names = []
        for thread in self.other_threads[:limit]:
            name = thread.get("python") or thread.get("comm") or "?"
            names.append(f"{thread.get('tid')} {name!r}" + ("" if thread.get("python") else " (native)"))
        more = len(self.other_threads) - limit
        return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def fork_records(evidence: Evidence) -> dict[int, ForkRecord]:
    """Every forked child of the run, by pid (the last record wins if a pid was reused)."""
    return {int(e.pid): ForkRecord.of(e) for e in evidence.events if e.name == FORKED and e.pid is not None}


def process_of(evidence: Evidence, pid: int | None) -> ProcessStacks | None:
    return next((p for p in evidence.processes if p.pid == pid), None) if pid is not None else None


def parent_threads_at_fork(evidence: Evidence, record: ForkRecord) -> list[ThreadStack]:
    """The captured stacks of the parent's threads that existed at fork (other than the forking one)."""
    parent = process_of(evidence, record.parent)
    if parent is None:
        return []
    tids = {t.get("tid") for t in record.other_threads}
    return [t for t in parent.threads if t.tid in tids]
