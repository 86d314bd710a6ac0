"""Kernel thread state of a hung tree, read twice across a short window before native capture.

Read *before* a back end attaches: a ptrace attach stops every thread ("t"), and the
stop would hide both a SIGSTOP and a spin. The two readings give each thread's state,
system call, kernel wait channel and the CPU time it used in between (schedstat's
nanoseconds where the kernel has them, else utime+stime clock ticks).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from lifeguard.capture.demangle import demangled
from lifeguard.capture.procstate import thread_name
from lifeguard.capture.symbols import resolve_live
from lifeguard.model.kernel import KernelState
from lifeguard.model.stacks import ProcessStacks, ThreadStack
from lifeguard.run.supervise import CaptureHook, HangContext

# Long enough for a spinning thread to collect measurable CPU on a loaded machine (ticks are
# 10 ms), short enough not to delay the capture noticeably.
SAMPLE_WINDOW = 0.3

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
class _Reading:
    state: str | None
    syscall: str | None
    wchan: str | None
    cpu: float | None  # seconds of CPU since the thread started


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):  # gone, or not ours to read
        return None


def _syscall_name(text: str | None) -> str | None:
    """``/proc/.../syscall`` is "NR args..." in a call, "-1 ..." between calls, "running" on a CPU."""
    if not text:
        return None
    head = text.split(None, 1)[0]
    if not head.lstrip("-").isdigit() or head.startswith("-"):
        return None
    number = int(head)
    return _SYSCALLS.get(number, f"syscall {number}")


def _read_thread(pid: int, tid: int) -> _Reading | None:
    base = f"/proc/{pid}/task/{tid}"
    stat = _read(f"{base}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    state = fields[0] if fields else None
    cpu: float | None = None
    schedstat = _read(f"{base}/schedstat")
    if schedstat and schedstat.split()[0].isdigit():
        cpu = int(schedstat.split()[0]) / 1e9
    elif len(fields) > 12:
        cpu = (int(fields[11]) + int(fields[12])) * _TICK  # utime + stime (fields 14, 15 of stat)
    wchan = (_read(f"{base}/wchan") or "").strip()
    return _Reading(state, _syscall_name(_read(f"{base}/syscall")), wchan if wchan not in ("", "0") else None, cpu)


def _tids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return []


def _read_tree(pids: Iterable[int]) -> dict[tuple[int, int], _Reading]:
    readings = {}
    for pid in pids:
        for tid in _tids(pid):
            reading = _read_thread(pid, tid)
            if reading is not None:
                readings[(pid, tid)] = reading
    return readings


def sample_tree(pids: list[int], window: float = SAMPLE_WINDOW) -> dict[tuple[int, int], KernelState]:
    """Each thread's KernelState from two readings ``window`` seconds apart."""
    first = _read_tree(pids)
    began = time.monotonic()
    time.sleep(window)
    second = _read_tree(pids)
    elapsed = time.monotonic() - began
    states = {}
    for key in first.keys() | second.keys():
        a, b = first.get(key), second.get(key)
        if b is None:
            assert a is not None
            states[key] = KernelState(state="X", first_state=a.state, syscall=a.syscall, wchan=a.wchan)
            continue
        used = b.cpu - a.cpu if a is not None and a.cpu is not None and b.cpu is not None else None
        states[key] = KernelState(state=b.state, first_state=a.state if a else None, syscall=b.syscall,
                                  wchan=b.wchan, cpu_seconds=used, window=elapsed if a else None)
    return states


def attach_states(processes: list[ProcessStacks], states: dict[tuple[int, int], KernelState],
                  pids: list[int]) -> list[ProcessStacks]:
    """Give every captured thread its KernelState; a process the back end could not read (or did not
    try) still gets its threads with their kernel state, without frames."""
    out = []
    seen = set()
    for process in processes:
        seen.add(process.pid)
        threads = tuple(replace(t, kernel=states.get((process.pid, t.tid))) for t in process.threads)
        if not threads:
            threads = _kernel_only_threads(process.pid, states)
        out.append(replace(process, threads=threads))
    for pid in pids:
        if pid not in seen and any(key[0] == pid for key in states):
            out.append(ProcessStacks(pid=pid, threads=_kernel_only_threads(pid, states),
                                     error="no native capture back end read this process"))
    return out


def _kernel_only_threads(pid: int, states: dict[tuple[int, int], KernelState]) -> tuple[ThreadStack, ...]:
    return tuple(ThreadStack(tid=tid, name=thread_name(pid, tid), kernel=state)
                 for (owner, tid), state in sorted(states.items()) if owner == pid)


def with_kernel_state(hook: CaptureHook | None) -> CaptureHook:
    """A capture hook that samples the tree's kernel state first, then runs ``hook`` (none: kernel
    state only, so "stopped" and "spinning" are told even without a native back end)."""

    def capture(context: HangContext) -> list[ProcessStacks]:
        states = sample_tree(context.pids)
        processes = demangled(resolve_live(hook(context))) if hook is not None else []
        return attach_states(processes, states, context.pids)

    return capture
