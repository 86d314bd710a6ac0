"""Crashes parked by lifeguard.child.crash_park: found from /proc, their stacks read, then ended by their signal.

A parked process has exactly one of the parked signals no longer caught (the handler reset itself as the signal
came) and a thread asleep in ``sleep(signum)``: a clock_nanosleep whose request, read from the process's memory,
is ``{signum, 0}``. Both come from the kernel without stopping anything, so a look at every wake of the wait
costs a few file reads. The capture hooks then read every thread's stacks, and the signal goes to the process
through a pidfd opened while it was parked (never to a pid that may have been reused): it dies of its own
crash, as the kernel will report.

A SIGTERM parked in a forked child (crash_park.install_termination) is read only when the child sent it to
itself (a library ending it); one from anyone else goes on at once. Who sent it is the ``si_pid`` of the signal
frame the kernel put on the thread's stack, just above the park's own frames.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lifeguard.child.protocol import PARKED_SIGNALS, PARKED_TERMINATION
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import ProcessStacks, ThreadStack
from lifeguard.proc.procfs import caught_signals, thread_ids
from lifeguard.proc.threadread import read_stack, read_syscall, read_words

# Reads the native stacks of the given live processes (the run's capture hooks, with their budget).
Capture = Callable[[list[int]], list[ProcessStacks]]

SLEEP_FUNCTIONS = ("sleep", "__sleep")
TRAMPOLINES = ("__restore_rt", "<signal handler called>")
NOTE = ("stacks read while the crashed process waited in lifeguard's fatal-signal handler (its body works in "
        "your folder, where no core may be written)")
TERMINATION_NOTE = ("stacks read while the process waited in lifeguard's SIGTERM handler: it had sent itself "
                    "SIGTERM (a process forked while its parent ran other threads parks it)")


# x86-64's signal frame for an SA_SIGINFO handler (the kernel's struct rt_sigframe): the handler's return
# address, a ucontext (uc_link at 16, the interrupted stack pointer at 168), then the siginfo at 312.
_LINK, _INTERRUPTED_SP, _INFO, _FRAME = 16, 168, 312, 440
_SIGINFO = struct.Struct("=iiiii")  # si_signo, si_errno, si_code, padding, si_pid
_SENT = (0, -6)  # si_code of kill() and of tgkill()/raise()
_SCAN = 1024  # the park's own frames (sleep, nanosleep) between the system call's stack pointer and the frame
_MAX_XSAVE = 64 * 1024  # the saved register state between the frame and the interrupted stack


def parked(pid: int, caught: int) -> tuple[int, int] | None:
    """(thread id, signal) of a crash parked in ``pid``, whose caught-signal mask is ``caught``, or None."""
    missing = [signum for signum in PARKED_SIGNALS if not caught >> (signum - 1) & 1]
    if not missing or len(missing) == len(PARKED_SIGNALS):
        return None  # all caught (nothing parked), or none: not a process that parks
    for signum in missing:  # more than one: another thread crashed too while the first waited (a torn heap)
        tid = _sleeping(pid, signum)
        if tid is not None:
            return tid, signum
    return None


def parked_termination(pid: int, caught: int) -> tuple[int, int, int] | None:
    """(thread id, sender's pid, si_code) of a SIGTERM parked in ``pid``, whose caught-signal mask is
    ``caught``, or None."""
    if caught >> (PARKED_TERMINATION - 1) & 1 or \
            any(not caught >> (signum - 1) & 1 for signum in PARKED_SIGNALS):
        return None  # it handles SIGTERM, or it is not a process that parks (or a crash of it is parked)
    tid = _sleeping(pid, PARKED_TERMINATION)
    sent = _sender(pid, tid) if tid is not None else None
    return (tid, *sent) if tid is not None and sent is not None else None


def _sender(pid: int, tid: int) -> tuple[int, int] | None:
    """The si_pid and si_code of the SIGTERM frame just above a parked thread's stack pointer; None where there
    is none."""
    found = read_stack(pid, tid, _SCAN + _FRAME)
    if found is None:
        return None
    pointer, data = found
    for offset in range(0, _SCAN, 8):
        signo, _, code, _, sender = _SIGINFO.unpack_from(data, offset + _INFO)
        if signo != PARKED_TERMINATION or code not in _SENT or int.from_bytes(
                data[offset + _LINK:offset + _LINK + 8], sys.byteorder):
            continue
        interrupted = int.from_bytes(data[offset + _INTERRUPTED_SP:offset + _INTERRUPTED_SP + 8], sys.byteorder)
        if pointer + offset + _FRAME <= interrupted < pointer + offset + _MAX_XSAVE:
            return sender, code
    return None


def _sleeping(pid: int, signum: int) -> int | None:
    """The thread of ``pid`` asleep in ``sleep(signum)``: a park's handler."""
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
            return tid
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


def crash_stacks(processes: list[ProcessStacks], pid: int, tid: int, signum: int,
                 code: int | None = None) -> list[ProcessStacks]:
    """The capture with the parked process marked as ended by ``signum`` (``code``: its si_code) in ``tid``."""
    name = signal.Signals(signum).name
    note = TERMINATION_NOTE if signum == PARKED_TERMINATION else NOTE
    out = []
    for process in processes:
        if process.pid == pid:
            threads: tuple[ThreadStack, ...] = tuple(_trimmed(t) if t.tid == tid else t for t in process.threads)
            process = replace(process, threads=threads, signal=SignalInfo(name, signum, code, None, tid),
                              notes=(*process.notes, note))
        out.append(process)
    return out


@dataclass
class ParkedCrashes:
    """Watches a run's processes for parked crashes (``look`` at every wake), keeps what it captured."""

    capture: Capture
    main: int = 0  # the run's own process: not forked from it, so it never parks a SIGTERM
    stacks: list[ProcessStacks] = field(default_factory=list)
    ended: set[int] = field(default_factory=set)  # the processes sent their parked signal: dying of it now
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def look(self, pids: list[int]) -> None:
        for pid in pids:
            caught = caught_signals(pid)
            if caught is None:
                continue  # gone, or not ours to read
            found = parked(pid, caught)
            if found is not None:
                if (pid, found[1]) not in self._seen:
                    self._seen.add((pid, found[1]))
                    self._end(pid, *found)
                continue
            ended = parked_termination(pid, caught) if pid != self.main else None
            if ended is not None and (pid, PARKED_TERMINATION) not in self._seen:
                self._seen.add((pid, PARKED_TERMINATION))
                tid, sender, code = ended
                self._end(pid, tid, PARKED_TERMINATION, code, read=sender == pid)  # only its own end is evidence

    def _end(self, pid: int, tid: int, signum: int, code: int | None = None, read: bool = True) -> None:
        try:
            handle = os.pidfd_open(pid)
        except OSError:
            return  # gone already: it died of its crash
        try:
            if read:
                captured = [p for p in self.capture([pid]) if p.pid == pid]
                self.stacks.extend(crash_stacks(captured, pid, tid, signum, code))
            try:
                signal.pidfd_send_signal(handle, signum)
            except OSError:
                pass  # it died of it meanwhile (its sleep ended)
            self.ended.add(pid)
        finally:
            os.close(handle)
