"""The supervisor's half of the watchdog (lifeguard.child.watchdog): start it, tell it what to kill.

The watchdog holds the read end of a pipe whose only writer is this process, so it sees end of file exactly
when the supervisor is gone, however it went (SIGKILL included), and then kills every run still registered.
The write end is close-on-exec: no run inherits it (a run holding it would keep the watchdog waiting).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.child import watchdog as child_watchdog

STOP_TIMEOUT = 5.0  # the watchdog's own exit after the pipe closes (nothing to kill by then)


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
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

    def guard_run(self, session_id: int, run_id: str) -> None:
        self._tell(f"run {session_id} {run_id}")

    def release_run(self, session_id: int) -> None:
        self._tell(f"done {session_id}")

    def close(self) -> None:
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
