"""Early hang detection: a run's tree that has stopped doing anything at all ends before its deadline.

A hung run used to wait for its whole deadline although every thread was asleep (most of a survey's time).
With ``RunSpec.hang_settle`` set, the supervisor looks at the tree at every wake of its wait loop and ends
the run as hung once it has been *still* for the settle period. Still means, at every look of the period:

- every thread of every process of the tree sleeps in the kernel (state ``S``; a zombie is ignored), and
  none sleeps for a time it chose (``nanosleep``/``clock_nanosleep``: ``time.sleep`` waits for the clock,
  which will come, so a sleeping loop is slow, not hung);
- no process or thread appeared or went away;
- the run wrote nothing (stdout, stderr, the result channel);
- the tree used almost no CPU time: less than IDLE_CPU_SHARE of one CPU over the period (a thread waiting
  for the GIL wakes every 5 ms to ask for it, for microseconds: a deadlock is not quite at zero).

So a program that computes (a thread runnable, CPU time growing: its own or a subprocess's, which is in the
tree), prints, starts processes or sleeps in ``time.sleep`` is never ended early. What is taken for a hang: a
tree in which every thread waits on a futex, a pipe, a socket or a child and nothing moves; a program that
waits on a remote peer with a timeout in a silent loop looks the same, and gets the whole deadline only
without early detection (it is opt-in: on for probes, ``PlanOptions.hang_settle``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from lifeguard.proc.threadread import ThreadReading, read_tree

# The share of one CPU a still tree may use between looks (GIL waiters' 5 ms wake-ups use about 0.1%).
IDLE_CPU_SHARE = 0.01
SLEEPING_STATES = frozenset({"S"})
GONE_STATES = frozenset({"Z", "X"})
# System calls in which a thread waits for a time it chose, not for another thread.
TIMED_SLEEPS = frozenset({"nanosleep", "clock_nanosleep"})


class Stillness:
    """Watches one run's tree; ``look()`` at every wake of the wait loop says how long it has been still."""

    def __init__(self, settle: float, outputs: Sequence[Path]) -> None:
        self.settle = settle
        self._outputs = tuple(outputs)
        self._since: float | None = None  # when the tree was first seen still (None: moving)
        self._threads: frozenset[tuple[int, int]] = frozenset()
        self._cpu = 0.0
        self._written = -1
        self.ended = False  # hung() said so: the run ends now, before its deadline

    def look(self, pids: Sequence[int], now: float | None = None) -> float:
        """Seconds the tree of ``pids`` has been still, up to now (0: it moves)."""
        now = time.monotonic() if now is None else now
        readings = {key: r for key, r in read_tree(pids).items() if r.state not in GONE_STATES}
        written = sum(_size(path) for path in self._outputs)
        threads = frozenset(readings)
        cpu = sum(r.cpu or 0.0 for r in readings.values())
        if not readings or not all(_asleep(r) for r in readings.values()):
            self._since = None
            return 0.0
        if self._since is None or threads != self._threads or written != self._written:
            self._restart(now, threads, cpu, written)
            return 0.0
        if cpu - self._cpu > IDLE_CPU_SHARE * max(now - self._since, 0.0) + 1e-3:
            self._restart(now, threads, cpu, written)  # it worked a little since: count from here
            return 0.0
        return now - self._since

    def hung(self, pids: Sequence[int]) -> bool:
        """True once the tree has been still for the settle period."""
        self.ended = self.look(pids) >= self.settle
        return self.ended

    def _restart(self, now: float, threads: frozenset[tuple[int, int]], cpu: float, written: int) -> None:
        self._since, self._threads, self._cpu, self._written = now, threads, cpu, written


def _asleep(reading: ThreadReading) -> bool:
    return reading.state in SLEEPING_STATES and reading.syscall not in TIMED_SLEEPS


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
