"""The discovery process, seen from the supervisor: start it, bound it, end its whole tree.

Scenario files are imported in a child (lifeguard.child.discovery), never here, with the start recipe
every child of lifeguard gets: the real interpreter (this one's, so the files see the packages they
always saw), its own session, a deadline, output bounded, and the whole tree killed. The tree is killed
every time, not only at the deadline: a file may fork or start processes at import, and nothing it
started may outlive the discovery. Its members are the discovery's session and process group (a plain
fork) and every process that carries its id in DISCOVER_ENV (one that called ``setsid``), found while
the discovery process is still an unreaped zombie, so its pid (their group's id) cannot be reused
meanwhile. If lifeguard itself is killed (SIGKILL: no cleanup), the kernel kills the discovery process
(its parent-death signal, set by child.discovery). One process loads every file of a session: its start-up
is paid once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.child.readable import readable
from lifeguard.proc.procfs import ZOMBIE_STATES, all_processes, has_env_marker

# The whole discovery's deadline (LIFEGUARD_DISCOVERY_TIMEOUT overrides it): a file whose top level imports
# a large library (torch) takes seconds; one that never returns is reported here, with where it is stuck.
DISCOVERY_TIMEOUT = 60.0
# At the deadline the process gets SIGABRT, on which its faulthandler prints every thread's Python stack
# (where the file is stuck); then this long for that, before SIGKILL.
DUMP_GRACE = 2.0
REAP_TIMEOUT = 2.0  # for a SIGKILLed process to be reaped (one in uninterruptible sleep is left to init)
POLL_INTERVAL = 0.05  # without pidfds only: how often the wait looks for the exit
RECORDS_CAP = 32 * 1024 * 1024  # more is not declarations: the process is stopped and the session refused
OUTPUT_TAIL = 64 * 1024  # of the process's stdout and stderr, kept for the error (faulthandler's stacks)
KILL_ROUNDS = 5  # a member may fork between the scan and the kill
EXEC_SETTLE = 2.0  # at most this long for a process in the middle of an exec to show its environment
READ_CHUNK = 1 << 16
# Chunks read from a pipe before the wait looks at the clock again; at the end, what is left in a pipe
# (no more than its buffer: the writer blocks when it is full) fits in one such read.
READS_AT_ONCE = 64

assert DUMP_GRACE < DISCOVERY_TIMEOUT, "the dump is a last step of the deadline, not a second deadline"

_BOOT = ("import sys; sys.path.insert(0, {package!r}); from lifeguard.child import discovery; "
         "discovery.main()")


@dataclass(frozen=True)
class Discovery:
    """How the discovery process ended, and its output (its records went to the caller as they came)."""

    status: int | None  # the exit code, negative for a signal; None when it could not be reaped
    timed_out: bool
    overflow: bool  # it wrote more than RECORDS_CAP of records
    output: str  # the tail of its stdout and stderr
    leftovers: tuple[int, ...]  # processes of its tree still running after it exited (killed)
    timeout: float


class _Pipes:
    """The two pipes the process writes: records (each whole line handed to ``on_record`` at once, up to
    RECORDS_CAP in all) and output (its tail kept)."""

    def __init__(self, records: int, output: int, on_record: Callable[[bytes], None]) -> None:
        self.records, self.output = records, output
        self.on_record = on_record
        self.open = [records, output]
        self.record_bytes = 0
        self.partial = b""  # a record line not yet ended
        self.output_bytes = bytearray()
        self.overflow = False
        for fd in self.open:
            os.set_blocking(fd, False)

    def read(self, ready: list[int]) -> None:
        """Read what is there, at most READS_AT_ONCE chunks a pipe: a writer as fast as the reader must not
        keep the wait from its deadline."""
        for fd in ready:
            for _ in range(READS_AT_ONCE):
                if fd not in self.open:
                    break
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    break
                if not chunk:
                    self.open.remove(fd)
                    break
                self._keep(fd, chunk)

    def _keep(self, fd: int, chunk: bytes) -> None:
        if fd == self.records:
            self.record_bytes += len(chunk)
            if self.record_bytes > RECORDS_CAP:
                self.overflow = True
                return
            *lines, self.partial = (self.partial + chunk).split(b"\n")
            for line in lines:
                self.on_record(line)
        else:
            self.output_bytes += chunk
            del self.output_bytes[:-OUTPUT_TAIL]

    def close(self) -> None:
        for fd in (self.records, self.output):
            os.close(fd)


def run_discovery(files: list[str], timeout: float, on_record: Callable[[bytes], None]) -> Discovery:
    """Import ``files`` (absolute paths) in a discovery process, handing each record line to ``on_record`` as
    it comes; return how the process ended. What ``on_record`` raises ends the discovery (its whole tree)
    at once and comes out of here."""
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    records_read, records_write = os.pipe()
    output_read, output_write = os.pipe()
    request: protocol.DiscoveryRequest = {"files": files, "sys_path": list(sys.path), "records_fd": records_write,
                                          "supervisor": os.getpid()}
    assert tuple(request) == protocol.DISCOVERY_REQUEST_KEYS
    env = {key: value for key, value in os.environ.items() if key != protocol.CHILD_ENV}
    env[protocol.DISCOVER_ENV] = token
    package = str(Path(__file__).resolve().parents[2])
    try:
        with tempfile.TemporaryFile() as request_file:
            request_file.write(repr(request).encode())
            request_file.seek(0)
            process = subprocess.Popen(
                [sys.executable, "-X", "faulthandler", "-c", _BOOT.format(package=package)],
                stdin=request_file, stdout=output_write, stderr=output_write, pass_fds=(records_write,),
                start_new_session=True, env=env)
    except BaseException:
        for fd in (records_read, records_write, output_read, output_write):
            os.close(fd)
        raise
    os.close(records_write)
    os.close(output_write)
    pipes = _Pipes(records_read, output_read, on_record)
    timed_out = False
    try:
        exited = _wait(process.pid, time.monotonic() + timeout, pipes)
        if pipes.overflow:
            _signal(process.pid, signal.SIGKILL)
        elif not exited:
            timed_out = True
            _signal(process.pid, signal.SIGABRT)
            _wait(process.pid, time.monotonic() + DUMP_GRACE, pipes)
        leftovers = end_tree(process.pid, token)
        pipes.read(list(pipes.open))  # what it wrote before it ended
    except BaseException:  # on_record's error, or interrupted (Ctrl-C, SIGTERM): nothing of it outlives us
        end_tree(process.pid, token)
        raise
    finally:
        status = _reap(process)
        pipes.close()
    # (A record line the process did not end, cut by its death, is no record.)
    return Discovery(status=status, timed_out=timed_out, overflow=pipes.overflow,
                     output=pipes.output_bytes.decode(errors="replace"), leftovers=tuple(leftovers), timeout=timeout)


def _wait(pid: int, deadline: float, pipes: _Pipes) -> bool:
    """Read the pipes until the process exits (True), or until the deadline passes or it wrote too much
    (False); never reaps it."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python or kernel without pidfds: look every POLL_INTERVAL
        pidfd = None
    try:
        while not _exited(pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or pipes.overflow:
                return False
            watched = pipes.open + ([pidfd] if pidfd is not None else [])
            pause = remaining if pidfd is not None else min(remaining, POLL_INTERVAL)
            ready = readable(watched, pause)
            pipes.read(ready)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exited(pid: int) -> bool:
    """Has ``pid`` exited? Asked without reaping it: a zombie keeps its pid, so its group stays ours to kill."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def end_tree(root: int, token: str) -> list[int]:
    """SIGKILL every live process of the discovery rooted at ``root`` (itself included, if still running);
    return the others found running, which its files left behind."""
    found: list[int] = []
    rounds = 0
    settle = time.monotonic() + EXEC_SETTLE
    while rounds < KILL_ROUNDS:
        members, undecided = tree_members(root, token)
        try:
            os.killpg(root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in members:
            _signal(pid, signal.SIGKILL)
        found.extend(pid for pid in members if pid != root and pid not in found)
        if members:
            rounds += 1
        elif undecided and time.monotonic() < settle:
            time.sleep(POLL_INTERVAL / 10)  # a process in the middle of an exec: its marker is readable soon
        else:
            break
    _reap_ours(found)
    return found


def tree_members(root: int, token: str) -> tuple[list[int], list[int]]:
    """Live processes of the discovery's session or group, or marked with its id in DISCOVER_ENV; and the
    processes that cannot say yet (in the middle of an exec, as a child that called setsid may be)."""
    me = os.getpid()
    members: list[int] = []
    undecided: list[int] = []
    for info in all_processes().values():
        if info.pid == me or info.state in ZOMBIE_STATES:  # zombies and the dead: nothing left to kill
            continue
        marked = root in (info.pgrp, info.sid) or has_env_marker(info.pid, protocol.DISCOVER_ENV, token)
        if marked:
            members.append(info.pid)
        elif marked is None:
            undecided.append(info.pid)
    return members, undecided


def _reap_ours(pids: list[int]) -> None:
    """Reap killed processes that were re-parented to us (when we are a subreaper), within REAP_TIMEOUT."""
    deadline = time.monotonic() + REAP_TIMEOUT
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        still = []
        for pid in pending:
            try:
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    still.append(pid)
            except ChildProcessError:
                pass  # not our child: its parent (or init) reaps it
        pending = still
        if pending:
            time.sleep(POLL_INTERVAL / 10)


def _reap(process: subprocess.Popen[bytes]) -> int | None:
    try:
        return process.wait(timeout=REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None
