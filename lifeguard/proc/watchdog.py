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
PIPE_ROOM = 60 * 1024  # written before the watchdog starts: less than a pipe holds (64 KiB), so it never blocks


class StartedWatchdog:
    """A started watchdog process: its pid and the write end of its pipe (as Popen offers them). The head start
    (lifeguard.run.headstart) forks one before this module is imported; ``spawn`` starts one here."""

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

    def poll(self) -> int | None:
        """Its exit code once it has exited (reaped here), else None."""
        if self.returncode is None:
            handle = ForkedChild(self.pid)
            if handle.wait_step(0):
                self.returncode = handle.returncode if handle.returncode is not None else 0
        return self.returncode


class Watchdog:
    """The supervisor's handle on its watchdog. It keeps what it told the watchdog, so a watchdog that is gone
    (a run of the same user may kill it) is replaced by a new one told the same (``revive``)."""

    def __init__(self, started: tuple[int, int] | None = None) -> None:
        """Start the watchdog, or keep the one ``started`` (its pid and the write end of its pipe)."""
        self._lock = threading.Lock()
        self._folders: list[str] = []
        self._runs: dict[int, str] = {}
        self._members: dict[int, dict[int, int]] = {}  # run's group -> pid -> start time
        self.proc: StartedWatchdog | None = StartedWatchdog(*started) if started is not None else spawn([])
        self.pid = self.proc.pid

    def revive(self) -> int | None:
        """If the watchdog has died (killed by a run), start another and tell it every folder and run still
        registered; its pid then, else None."""
        with self._lock:
            if self.proc is None or self.proc.poll() is None:
                return None
            return self._replace()

    def _replace(self) -> int:
        """A new watchdog told what the last one knew (the lock held)."""
        lines = [f"cgroup {folder}" for folder in self._folders]
        lines += [child_watchdog.run_line(group, run_id) for group, run_id in self._runs.items()]
        lines += [f"member {group} {pid} {start}" for group, pids in self._members.items()
                  for pid, start in pids.items()]
        self.proc = spawn(lines)
        self.pid = self.proc.pid
        return self.pid

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
            except OSError:  # the watchdog is gone (killed): a new one, told all that is registered
                self.proc.poll()
                self._replace()

    def guard_folder(self, folder: Path) -> None:
        with self._lock:
            self._folders.append(str(folder))
        self._tell(f"cgroup {folder}")

    def release_folder(self, folder: Path) -> None:
        with self._lock:
            self._folders = [f for f in self._folders if f != str(folder)]
        self._tell(f"released {folder}")

    def guard_run(self, group: int, run_id: str) -> None:
        with self._lock:
            self._runs[group] = run_id
        self._tell(child_watchdog.run_line(group, run_id))

    def guard_member(self, group: int, pid: int, start: int) -> None:
        """A process of run ``group`` found by ancestry: killed with the run if the supervisor vanishes."""
        with self._lock:
            self._members.setdefault(group, {})[pid] = start
        self._tell(f"member {group} {pid} {start}")

    def release_run(self, group: int) -> None:
        with self._lock:
            self._runs.pop(group, None)
            self._members.pop(group, None)
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


def spawn(lines: list[str]) -> StartedWatchdog:
    """Start a watchdog whose pipe holds ``lines`` before it runs: a supervisor killed the moment after still
    leaves it knowing them. In a session of its own (the terminal's Ctrl-C reaches the supervisor, never the
    watchdog), its output to /dev/null."""
    data = "".join(f"{line}\n" for line in lines).encode(errors="surrogateescape")
    read_end, write_end = os.pipe()  # both close-on-exec: the watchdog gets the read end as its stdin only
    try:
        first = os.write(write_end, data[:PIPE_ROOM]) if data else 0
        argv = [sys.executable, "-I", "-S", str(Path(child_watchdog.__file__)), protocol.RUN_ID_ENV]
        pid = os.posix_spawn(sys.executable, argv, os.environ, setsid=True, file_actions=[
            (os.POSIX_SPAWN_DUP2, read_end, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    started = StartedWatchdog(pid, write_end)
    if first < len(data) and started.stdin is not None:  # more than the pipe holds: the watchdog reads it now
        started.stdin.write(data[first:])
        started.stdin.flush()
    return started
