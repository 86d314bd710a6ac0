"""One reading of every thread of a process tree from /proc: state, system call, wait channel, CPU time.

The hang capture reads it twice around a short window (capture.threadstate); the supervisor's early hang
detection reads it at every wake of its wait loop (run.stillness). Nothing here stops or attaches to a thread.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lifeguard.proc.procfs import stat_fields, thread_ids

# The system calls threads wait in, by number, for the two architectures lifeguard runs on.
_WAIT_SYSCALLS = {
    "x86_64": {0: "read", 1: "write", 7: "poll", 23: "select", 24: "sched_yield", 34: "pause", 35: "nanosleep",
               43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 42: "connect",
               61: "wait4", 65: "semop", 72: "fcntl", 73: "flock", 128: "rt_sigtimedwait", 130: "rt_sigsuspend",
               202: "futex", 220: "semtimedop", 230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid",
               270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4", 426: "io_uring_enter",
               441: "epoll_pwait2", 449: "futex_waitv"},
    "aarch64": {22: "epoll_pwait", 25: "fcntl", 32: "flock", 63: "read", 64: "write", 72: "pselect6",
                73: "ppoll", 95: "waitid", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep",
                124: "sched_yield", 133: "rt_sigsuspend", 137: "rt_sigtimedwait", 193: "semop",
                192: "semtimedop", 202: "accept", 203: "connect", 206: "sendto", 207: "recvfrom",
                211: "sendmsg", 212: "recvmsg", 242: "accept4", 260: "wait4", 426: "io_uring_enter",
                441: "epoll_pwait2", 449: "futex_waitv"},
}
_SYSCALLS = _WAIT_SYSCALLS.get(platform.machine(), {})
_TICK = 1.0 / (os.sysconf("SC_CLK_TCK") or 100)


@dataclass(frozen=True)
class ThreadReading:
    state: str | None
    syscall: str | None
    wchan: str | None
    cpu: float | None  # seconds of CPU since the thread started
    futex: int | None = None  # the address a futex wait sleeps on (its first argument)
    stack: int | None = None  # its stack pointer, while it sleeps in a system call


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):  # gone, or not ours to read
        return None


def _parse_syscall(text: str | None) -> tuple[str, tuple[int, ...]] | None:
    """``/proc/.../syscall`` is "NR args..." in a call, "-1 ..." between calls, "running" on a CPU: the call's
    name and its arguments, or None."""
    if not text:
        return None
    fields = text.split()
    if not fields[0].isdigit():
        return None
    number = int(fields[0])
    try:
        args = tuple(int(field, 16) for field in fields[1:7])
    except ValueError:
        args = ()
    return _SYSCALLS.get(number, f"syscall {number}"), args


def read_syscall(pid: int, tid: int) -> tuple[str, tuple[int, ...]] | None:
    """The system call a thread sleeps in and its arguments, or None (running, gone, unreadable)."""
    return _parse_syscall(_read(f"/proc/{pid}/task/{tid}/syscall"))


def read_memory(pid: int, address: int, size: int) -> bytes | None:
    """``size`` bytes at ``address`` in a live process's memory (no stop, no attach), or None."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.pread(fd, size, address)
    except (OSError, OverflowError):
        return None
    finally:
        os.close(fd)
    return data if len(data) == size else None


def read_words(pid: int, address: int, count: int) -> tuple[int, ...] | None:
    """``count`` native ints at ``address`` in a live process's memory (no stop, no attach), or None."""
    data = read_memory(pid, address, 4 * count)
    if data is None:
        return None
    return tuple(int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(data), 4))


def read_stack(pid: int, tid: int, size: int) -> tuple[int, bytes] | None:
    """The stack pointer of a thread asleep in a system call and the ``size`` bytes above it (no stop, no
    attach), or None."""
    pointer = _stack_pointer(_read(f"/proc/{pid}/task/{tid}/syscall"))
    if pointer is None:
        return None
    data = read_memory(pid, pointer, size)
    return (pointer, data) if data is not None else None


def read_thread(pid: int, tid: int) -> ThreadReading | None:
    base = f"/proc/{pid}/task/{tid}"
    read = stat_fields(f"{base}/stat")
    if read is None:
        return None
    fields = read[1]
    state = fields[0]
    cpu: float | None = None
    schedstat = _read(f"{base}/schedstat")
    if schedstat and schedstat.split()[0].isdigit():
        cpu = int(schedstat.split()[0]) / 1e9
    elif len(fields) > 12:
        cpu = (int(fields[11]) + int(fields[12])) * _TICK  # utime + stime (fields 14, 15 of stat)
    wchan = (_read(f"{base}/wchan") or "").strip()
    text = _read(f"{base}/syscall")
    call = _parse_syscall(text)
    syscall, args = call if call is not None else (None, ())
    return ThreadReading(state, syscall, wchan if wchan not in ("", "0") else None, cpu,
                         args[0] if syscall == "futex" and args else None,
                         _stack_pointer(text))


def _stack_pointer(text: str | None) -> int | None:
    """The stack pointer of a thread in a system call, from ``/proc/.../syscall``'s line: after the call's
    number and six arguments (None when it is running or between calls)."""
    fields = (text or "").split()
    if len(fields) < 9 or not fields[0].isdigit():
        return None
    try:
        return int(fields[7], 16)
    except ValueError:
        return None


def read_tree(pids: Iterable[int]) -> dict[tuple[int, int], ThreadReading]:
    readings = {}
    for pid in pids:
        for tid in thread_ids(pid):
            reading = read_thread(pid, tid)
            if reading is not None:
                readings[(pid, tid)] = reading
    return readings
