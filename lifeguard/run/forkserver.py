"""Supervisor side of the warm fork-server (see forkserver_child for the server itself).

The server forks each run from an interpreter that already started and imported
the bootstrap, which saves the interpreter start-up of every run. Everything else
(deadline, escalation ladder, tree kill, classification) is the same supervision
as for a fresh child: supervise.supervise() watches a ForkedHandle.
"""

from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.child.readable import readable
from lifeguard.interpreter import Interpreter
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.run.containment import containment, spawn
from lifeguard.run.launch import RunFiles, child_env, child_path_dir, child_spec, precompile_child_side
from lifeguard.run.live import LiveOutput
from lifeguard.run.relay import Relays
from lifeguard.run.supervise import DEFAULT_OUTPUT_CAP, CaptureHook, starting, supervise

START_TIMEOUT = 30.0  # the server's own start-up (imports) and each fork reply
CLOSE_TIMEOUT = 5.0
ORPHAN_POLL = 0.02  # a run whose server died is waited for by polling (it is no Popen of ours)


class ForkServerError(RuntimeError):
    """The fork-server died or stopped answering."""


class ForkServer:
    """One server process; its replies are read by whichever thread waits for one (no reader thread of its own:
    a reply handed from a reader thread to the waiting one cost each run two more wake-ups, a fifth of a warm
    run's time on a 2-core machine)."""

    def __init__(self, interpreter: Interpreter) -> None:
        precompile_child_side(interpreter.executable, interpreter.version)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        boot = (f"import sys; sys.path.insert(0, {str(child_path_dir())!r}); "
                f"from lifeguard.child import forkserver; forkserver.serve({theirs.fileno()})")
        env = dict(os.environ, **{protocol.CHILD_ENV: "1"})
        session = containment().session  # the server lives in the session's folder: the watchdog's kill covers it
        self.proc = spawn(
            [interpreter.executable, "-X", "faulthandler", "-u", "-c", boot],
            session.procs_file if session is not None else None, parent_death=False, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.sock = ours
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._reading = False  # a thread reads the socket now (the others wait for its news)
        self._buffer = b""
        self._started: list[int] = []
        self._exited: dict[int, int] = {}
        self._dead = False

    def _await(self, done: Callable[[], bool], timeout: float) -> bool:
        """Until ``done()`` (checked under the lock) or the server is gone, at most ``timeout``: the caller reads
        the replies itself while no other thread does."""
        deadline = time.monotonic() + timeout
        looked = False  # a wait of 0 still reads what is there
        while True:
            with self._cond:
                if done() or self._dead:
                    return done()
                remaining = deadline - time.monotonic()
                if remaining <= 0 and (looked or self._reading):
                    return False
                if self._reading:  # another waiter reads: its news, or its stepping down, wakes us
                    self._cond.wait(remaining)
                    continue
                self._reading = True
            looked = True
            try:
                self._read(max(0.0, remaining))
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()

    def _read(self, timeout: float) -> None:
        """What the server replied within ``timeout``, into the tables."""
        try:
            if not readable([self.sock.fileno()], timeout):
                return
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        with self._cond:
            if not data:
                self._dead = True
                return
            self._buffer += data
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if protocol.SERVER_STARTED in message:
                    self._started.append(message[protocol.SERVER_STARTED])
                else:
                    self._exited[message[protocol.SERVER_EXITED]] = message[protocol.SERVER_STATUS]

    def fork(self, spec: RunSpec, run_id: str, fds: tuple[int, int, int], join: Path | None) -> int:
        """Ask for one run (whose child first joins the cgroup of ``join``); returns the forked child's pid."""
        events_fd, out_fd, err_fd = fds
        env = child_env(spec, run_id, events_fd=events_fd)
        request = {protocol.REQUEST_SPEC: child_spec(spec), protocol.REQUEST_ENV: env,
                   protocol.REQUEST_JOIN: str(join) if join is not None else ""}
        line = (json.dumps(request) + "\n").encode()
        with self._send_lock:  # one request at a time: its "started" is the next one
            if self._dead:
                raise ForkServerError("the fork-server is gone")
            self.sock.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            if not self._await(lambda: bool(self._started), START_TIMEOUT):
                if self._dead:
                    raise ForkServerError("the fork-server died")
                raise ForkServerError(f"the fork-server did not fork within {START_TIMEOUT:.0f} s")
            with self._cond:
                return self._started.pop(0)

    @property
    def alive(self) -> bool:
        return not self._dead and self.proc.poll() is None

    def wait_exit(self, pid: int, timeout: float) -> int | None:
        self._await(lambda: pid in self._exited, timeout)
        with self._cond:
            return self._exited.get(pid)

    def forget(self, pid: int) -> None:
        with self._cond:
            self._exited.pop(pid, None)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.proc.wait(timeout=CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=CLOSE_TIMEOUT)


class ForkedHandle:
    """A run forked by the server: its exit status comes from the server's reply."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self._returncode: int | None = None
        self.lost: str | None = None  # the server, lifeguard's own process, always reads the status

    def wait_step(self, timeout: float) -> bool:
        if self._returncode is None:
            if self.server.alive:
                self._returncode = self.server.wait_exit(self.pid, timeout)
            else:
                self._returncode = self._wait_orphan(timeout)
            if self._returncode is not None:
                self.server.forget(self.pid)  # the news is ours now: the server's table must not grow a run
        return self._returncode is not None

    def _wait_orphan(self, timeout: float) -> int | None:
        """The server died under its run: the run was re-parented to us (the subreaper), so we wait for it."""
        news = self.server.wait_exit(self.pid, 0)  # its last reply may have made it
        if news is not None:
            return news
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not ours (yet): the kernel re-parents it as the server exits
            time.sleep(min(timeout, ORPHAN_POLL))
            return None
        if pid == 0:
            time.sleep(min(timeout, ORPHAN_POLL))
            return None
        return os.waitstatus_to_exitcode(status)

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def reap(self, timeout: float) -> None:
        self.wait_step(timeout)  # the server reaps it; we only wait for the news
        self.server.forget(self.pid)


class ForkServers:
    """The fork-server of a session, started on first use and restarted if it dies."""

    def __init__(self, interpreter: Interpreter) -> None:
        self.interpreter = interpreter
        self._server: ForkServer | None = None
        self._lock = threading.Lock()

    def _get(self) -> ForkServer:
        with self._lock:
            if self._server is None or not self._server.alive:
                if self._server is not None:
                    self._server.close()
                self._server = ForkServer(self.interpreter)
            return self._server

    def run(self, spec: RunSpec, *, cancel: threading.Event | None = None,
            capture_hooks: tuple[CaptureHook, ...] = (), live: LiveOutput | None = None,
            meanwhile: Callable[[], None] | None = None, reuse: Path | None = None) -> RunResult:
        """Run ``spec`` in a child forked by the server (``meanwhile`` and ``reuse`` as for run_once)."""
        files, events_fd = RunFiles.create(spec.run_dir, reuse=reuse, emptied=True)
        relays = Relays(spec, files.stdout, files.stderr, DEFAULT_OUTPUT_CAP, live, pump_now=False)
        run_id = os.urandom(16).hex()
        membership = containment().for_run(run_id)
        started = time.monotonic()
        with starting(membership, relays, events_fd):
            server = self._get()
            pid = server.fork(spec, run_id, (events_fd, *relays.child_ends), membership.join_file())
            membership.started(pid)
        return supervise(spec, ForkedHandle(server, pid), membership, files, relays, started, cancel=cancel,
                         capture_hooks=capture_hooks, meanwhile=meanwhile)

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None
