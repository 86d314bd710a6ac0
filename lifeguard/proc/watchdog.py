"""The supervisor's half of the watchdog (lifeguard.child.watchdog): start it, tell it what to kill.

The watchdog holds the read end of a pipe whose only writer is this process, so it sees end of file exactly
when the supervisor is gone, however it went (SIGKILL included), and then kills every run still registered.
The write end is close-on-exec: no run inherits it (a run holding it would keep the watchdog waiting).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from lifeguard.child import protocol
from lifeguard.child import watchdog as child_watchdog
from lifeguard.proc.handles import ForkedChild

STOP_TIMEOUT = 5.0  # the watchdog's own exit after the pipe closes (nothing to kill by then)


class StartedWatchdog:
    """A watchdog started before this module was imported (lifeguard.run.headstart), as Popen offers it."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(pipe, "wb")
        self.returncode: int | None = None

    def wait(self, timeout: float) -> int:
        """Its exit code, waited for on a pidfd (no polling: it exits milliseconds after its pipe closes)."""
        if self.returncode is None:
            handle = ForkedChild(self.pid)
            if not handle.wait_step(timeout):
                raise subprocess.TimeoutExpired(["watchdog"], timeout)
            self.returncode = handle.returncode if handle.returncode is not None else 0
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass


class Watchdog:
    def __init__(self, started: tuple[int, int] | None = None) -> None:
        """Start the watchdog, or keep the one ``started`` (its pid and the write end of its pipe)."""
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | StartedWatchdog | None
        if started is not None:
            self.proc = StartedWatchdog(*started)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(child_watchdog.__file__)), protocol.RUN_ID_ENV],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # the terminal's Ctrl-C reaches the supervisor, never the watchdog
            )
        self.pid = self.proc.pid

    def supervisor_fd(self) -> int | None:
        """The pipe's end that only the supervisor may hold: a process forked from the supervisor must close
        its copy, or the watchdog would never see the supervisor go."""
        proc = self.proc
        return proc.stdin.fileno() if proc is not None and proc.stdin is not None else None

    def _tell(self, line: str) -> None:
        with self._lock:
            if self.proc is None or self.proc.stdin is None:
                return
            try:
                self.proc.stdin.write(line.encode(errors="surrogateescape") + b"\n")
                self.proc.stdin.flush()
            except OSError:
                pass  # the watchdog is gone: the runs still get killed by the supervisor itself

    def guard_folder(self, folder: Path) -> None:
        self._tell(f"cgroup {folder}")

    def release_folder(self, folder: Path) -> None:
        self._tell(f"released {folder}")

    def guard_run(self, group: int, run_id: str) -> None:
        self._tell(child_watchdog.run_line(group, run_id))

    def release_run(self, group: int) -> None:
        self._tell(f"done {group}")

    def close(self, *, wait: bool = True) -> None:
        """Close its pipe (it exits at once: nothing is registered any more), and with ``wait`` reap it."""
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        if not wait:
            return
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
