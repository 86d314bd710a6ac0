"""Python stacks of a run's processes, asked for while they run: faulthandler dumps of every thread, sent by
the dump signal to each Python process of the tree (at a hang's deadline, or when a Ctrl-C ends a forked test
that the pytest plugin's interrupt line then names)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

from lifeguard.child.protocol import faulthandler_file
from lifeguard.model.run import RunSpec, StartMode
from lifeguard.proc.procfs import signal_caught
from lifeguard.run.launch import DUMP_SIGNAL

# How long to wait for all faulthandler dumps of a tree after signalling it.
DUMP_TIMEOUT = 1.0


class Waitable(Protocol):
    """A started run's main process, as much of it as a dump needs (supervise.ChildHandle has more)."""

    pid: int

    def wait_step(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; True once the process has exited."""
        ...


def dump_where_interrupted(exc: BaseException, spec: RunSpec, handle: Waitable) -> None:
    """A Ctrl-C while a forked test's child runs (supervised or not yet): its Python stacks, for pytest's
    Ctrl-C line to name the test's line (pytest_plugin.guard.interrupted_at), before the child is ended. A child
    that has exited is left alone: once reaped, its pid may be another process's."""
    if isinstance(exc, KeyboardInterrupt) and spec.mode is StartMode.PYTEST_FORK and not handle.wait_step(0.0):
        dump_python_stacks([handle.pid], spec.run_dir)


def dump_python_stacks(pids: list[int], run_dir: Path) -> dict[str, str]:
    """Ask every Python process of the tree for a faulthandler dump of all threads."""
    sizes: dict[int, int] = {}
    for pid in pids:
        if not signal_caught(pid, DUMP_SIGNAL):
            continue  # not one of ours (or not Python): the signal would kill it
        dump = run_dir / faulthandler_file(pid)
        sizes[pid] = dump.stat().st_size if dump.exists() else 0
        try:
            os.kill(pid, DUMP_SIGNAL)
        except ProcessLookupError:
            sizes.pop(pid)
    deadline = time.monotonic() + DUMP_TIMEOUT
    pending = set(sizes)
    stable: dict[int, int] = {}
    while pending and time.monotonic() < deadline:
        time.sleep(0.01)
        for pid in list(pending):
            dump = run_dir / faulthandler_file(pid)
            size = dump.stat().st_size if dump.exists() else 0
            # Done when the dump grew and stopped growing between two looks.
            if size > sizes[pid] and stable.get(pid) == size:
                pending.discard(pid)
            stable[pid] = size
    stacks = {}
    for pid in sorted(sizes):
        try:
            text = (run_dir / faulthandler_file(pid)).read_text(errors="replace")
        except OSError:
            continue
        if text.strip():
            stacks[str(pid)] = text[-64 * 1024:]
    return stacks
