"""What the kernel says a thread was doing while a hung run was captured.

Function names on a stack say what code a thread is in, not whether it runs: a thread
parked in an OpenMP barrier, in a Rust runtime's raw ``syscall`` (a futex wait) or in
``__GI___wait4`` sleeps as soundly as one in ``pthread_cond_wait``. The kernel knows:
the thread's state (R/S/D/T/Z), the system call it sits in, and how much CPU it used
between two readings. Rules decide "blocked", "spinning" and "stopped" from this, and
keep function-name tables only to name *what* a blocked thread waits for.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A thread that used at least this share of one CPU across the sampling window is
# spinning, not waiting: a sched_yield or busy-poll loop. Sleeping threads use ~0.
SPINNING_CPU_SHARE = 0.2


class Activity(str, enum.Enum):
    """What a thread was doing across the sampling window."""

    BLOCKED = "blocked"  # asleep in the kernel (futex, wait4, poll, read, nanosleep...)
    SPINNING = "spinning"  # used CPU: a busy loop
    STOPPED = "stopped"  # SIGSTOP / job control / a tracer holds it
    EXITED = "exited"  # zombie or gone between the readings
    UNKNOWN = "unknown"  # runnable without measured CPU, or unreadable

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class KernelState:
    """Two readings of /proc/PID/task/TID/{stat,syscall,wchan,schedstat} ``window`` seconds apart."""

    state: str | None  # one-letter state at the second reading ("S", "R", "D", "T", "t", "Z")
    first_state: str | None = None  # the state at the first reading
    syscall: str | None = None  # the system call it sits in ("futex", "wait4"), None when running/unknown
    wchan: str | None = None  # the kernel function it sleeps in ("futex_wait_queue", "do_wait")
    cpu_seconds: float | None = None  # CPU time used between the readings
    window: float | None = None  # seconds between the readings
    # A futex wait's first three ints at its address (second reading): for a pthread_join the word is the joined
    # thread's tid; for a pthread mutex, the third is its owner's tid. The stack says which it is.
    futex_words: tuple[int, ...] | None = None
    # The mapping that holds the futex word, and the one that holds the thread's stack pointer (while it sleeps
    # in a call): glibc puts a thread's descriptor at the top of its stack's mapping, and from 2.41 pthread_join
    # waits on a word of the joined thread's descriptor, not on its tid: the two ranges match then.
    futex_region: tuple[int, int] | None = None
    stack_region: tuple[int, int] | None = None

    @property
    def activity(self) -> Activity:
        states = {self.state, self.first_state} - {None}
        if not states:
            return Activity.UNKNOWN
        if states & {"Z", "X"}:
            return Activity.EXITED
        if states <= {"T", "t"}:
            return Activity.STOPPED
        if self.cpu_seconds is not None and self.window:
            if self.cpu_seconds >= SPINNING_CPU_SHARE * self.window:
                return Activity.SPINNING
            if states <= {"S", "D", "I"}:
                return Activity.BLOCKED
        elif states == {"R"}:
            return Activity.SPINNING  # runnable at both readings and no CPU figure: call it running
        elif states <= {"S", "D", "I"}:
            return Activity.BLOCKED
        return Activity.UNKNOWN

    @property
    def cpu_share(self) -> float | None:
        if self.cpu_seconds is None or not self.window:
            return None
        return self.cpu_seconds / self.window

    def label(self) -> str:
        """``blocked in futex``, ``spinning (97% CPU)``, ``stopped``: one line for the terminal."""
        activity = self.activity
        if activity is Activity.BLOCKED:
            return f"blocked in {self.syscall}" if self.syscall else "blocked"
        if activity is Activity.SPINNING:
            share = self.cpu_share
            return f"spinning ({share:.0%} CPU)" if share is not None else "running"
        return str(activity)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "first_state": self.first_state, "syscall": self.syscall,
                "wchan": self.wchan, "cpu_seconds": self.cpu_seconds, "window": self.window,
                "activity": self.activity.value,
                "futex_words": list(self.futex_words) if self.futex_words is not None else None,
                "futex_region": list(self.futex_region) if self.futex_region is not None else None,
                "stack_region": list(self.stack_region) if self.stack_region is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelState:
        cpu = data.get("cpu_seconds")
        window = data.get("window")
        words = data.get("futex_words")
        return cls(state=data.get("state"), first_state=data.get("first_state"), syscall=data.get("syscall"),
                   wchan=data.get("wchan"), cpu_seconds=float(cpu) if cpu is not None else None,
                   window=float(window) if window is not None else None,
                   futex_words=tuple(int(w) for w in words) if isinstance(words, list) else None,
                   futex_region=_region(data.get("futex_region")), stack_region=_region(data.get("stack_region")))


def _region(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if isinstance(value, list) and len(value) == 2 else None
