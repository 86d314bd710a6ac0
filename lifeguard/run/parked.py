"""Crashes parked by lifeguard.child.crash_park: found from /proc, their stacks read, then ended by their signal.

A parked process has exactly one of the parked signals no longer caught (the handler reset itself as the signal
came) and a thread asleep in ``sleep(signum)``: a clock_nanosleep whose request, read from the process's memory,
is ``{signum, 0}``. Both come from the kernel without stopping anything, so a look at every wake of the wait
costs a few file reads. The capture hooks then read every thread's stacks, and the signal goes to the process
through a pidfd opened while it was parked (never to a pid that may have been reused): it dies of its own
crash, as the kernel will report.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lifeguard.child.protocol import PARKED_SIGNALS
from lifeguard.model.stacks import ProcessStacks, SignalInfo, ThreadStack
from lifeguard.proc.procfs import caught_signals, thread_ids
from lifeguard.proc.threadread import read_syscall, read_words

# Reads the native stacks of the given live processes (the run's capture hooks, with their budget).
Capture = Callable[[list[int]], list[ProcessStacks]]

SLEEP_FUNCTIONS = ("sleep", "__sleep")
TRAMPOLINES = ("__restore_rt", "<signal handler called>")
NOTE = ("stacks read while the crashed process waited in lifeguard's fatal-signal handler (its body works in "
        "your folder, where no core may be written)")


def parked(pid: int) -> tuple[int, int] | None:
    """(thread id, signal) of a crash parked in ``pid``, or None."""
    caught = caught_signals(pid)
    if caught is None:
        return None
    missing = [signum for signum in PARKED_SIGNALS if not caught >> (signum - 1) & 1]
    if len(missing) != 1:
        return None  # all caught (nothing parked), or none: not a process that parks
    signum = missing[0]
    for tid in thread_ids(pid):
        call = read_syscall(pid, tid)
        if call is None:
            continue
        name, args = call
        if name == "clock_nanosleep":
            request = args[2] if len(args) > 2 else None
        else:
            request = args[0] if name == "nanosleep" and args else None
        if request and read_words(pid, request, 4) == (signum, 0, 0, 0):
            return tid, signum
    return None


def _trimmed(thread: ThreadStack) -> ThreadStack:
    """The parked thread without the park's own frames (the sleep and the trampoline under it)."""
    frames = thread.frames
    for position, frame in enumerate(frames[:8]):
        if frame.function in SLEEP_FUNCTIONS:
            after = position + 1
            if after < len(frames) and (frames[after].function in TRAMPOLINES or frames[after].function is None):
                return replace(thread, frames=frames[after + 1:], kernel=None)  # its sleep is the park's
    return replace(thread, kernel=None)


def crash_stacks(processes: list[ProcessStacks], pid: int, tid: int, signum: int) -> list[ProcessStacks]:
    """The capture with the parked process marked as a crash by ``signum`` in ``tid``."""
    name = signal.Signals(signum).name
    out = []
    for process in processes:
        if process.pid == pid:
            threads: tuple[ThreadStack, ...] = tuple(_trimmed(t) if t.tid == tid else t for t in process.threads)
            process = replace(process, threads=threads, signal=SignalInfo(name, signum, None, None, tid),
                              notes=(*process.notes, NOTE))
        out.append(process)
    return out


@dataclass
class ParkedCrashes:
    """Watches a run's processes for parked crashes (``look`` at every wake), keeps what it captured."""

    capture: Capture
    stacks: list[ProcessStacks] = field(default_factory=list)
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def look(self, pids: list[int]) -> None:
        for pid in pids:
            found = parked(pid)
            if found is None or (pid, found[1]) in self._seen:
                continue
            self._seen.add((pid, found[1]))
            self._end(pid, *found)

    def _end(self, pid: int, tid: int, signum: int) -> None:
        try:
            handle = os.pidfd_open(pid)
        except OSError:
            return  # gone already: it died of its crash
        try:
            captured = [p for p in self.capture([pid]) if p.pid == pid]
            self.stacks.extend(crash_stacks(captured, pid, tid, signum))
            try:
                signal.pidfd_send_signal(handle, signum)
            except OSError:
                pass  # it died of it meanwhile (its sleep ended)
        finally:
            os.close(handle)
