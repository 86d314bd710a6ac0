"""Kernel thread state of a hung tree, read twice across a short window before native capture.

Read *before* a back end attaches: a ptrace attach stops every thread ("t"), and the
stop would hide both a SIGSTOP and a spin. The two readings give each thread's state,
system call, kernel wait channel and the CPU time it used in between (schedstat's
nanoseconds where the kernel has them, else utime+stime clock ticks).
"""

from __future__ import annotations

import time
from dataclasses import replace

from lifeguard.capture.demangle import demangled
from lifeguard.capture.symbols import resolve_live
from lifeguard.model.kernel import KernelState
from lifeguard.model.stacks import ProcessStacks, ThreadStack
from lifeguard.proc.procfs import mapping_of, mappings, thread_name
from lifeguard.proc.threadread import read_tree, read_words
from lifeguard.run.supervise import CaptureHook, HangContext

# Long enough for a spinning thread to collect measurable CPU on a loaded machine (ticks are
# 10 ms), short enough not to delay the capture noticeably.
SAMPLE_WINDOW = 0.3
# Read at a futex's address: the word itself and the two after it (a pthread mutex's owner is the third).
FUTEX_WORDS = 3


def sample_tree(pids: list[int], window: float = SAMPLE_WINDOW) -> dict[tuple[int, int], KernelState]:
    """Each thread's KernelState from two readings ``window`` seconds apart."""
    first = read_tree(pids)
    began = time.monotonic()
    time.sleep(window)
    second = read_tree(pids)
    elapsed = time.monotonic() - began
    states = {}
    ranges = {pid: mappings(pid) for pid in {key[0] for key in second}}
    for key in first.keys() | second.keys():
        a, b = first.get(key), second.get(key)
        if b is None:
            assert a is not None
            states[key] = KernelState(state="X", first_state=a.state, syscall=a.syscall, wchan=a.wchan)
            continue
        used = b.cpu - a.cpu if a is not None and a.cpu is not None and b.cpu is not None else None
        words = read_words(key[0], b.futex, FUTEX_WORDS) if b.futex is not None else None
        states[key] = KernelState(state=b.state, first_state=a.state if a else None, syscall=b.syscall,
                                  wchan=b.wchan, cpu_seconds=used, window=elapsed if a else None,
                                  futex_words=words, futex_region=mapping_of(ranges[key[0]], b.futex),
                                  stack_region=mapping_of(ranges[key[0]], b.stack))
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
