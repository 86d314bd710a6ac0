"""The warm fork-server: runs inside a child interpreter, never in the supervisor.

A small single-threaded process that has imported the child bootstrap and frozen
its heap (gc.freeze, so forked children do not copy-on-write it back) forks one
child per run on request. Protocol over a Unix stream socket, one JSON line each:

  supervisor -> server  {"spec": {...}, "env": {...}}  with 3 descriptors attached
                        (events, stdout, stderr) through SCM_RIGHTS
  server -> supervisor  {"started": PID}   (in request order)
                        {"exited": PID, "status": RETURNCODE}  (negative: signal)

The server keeps one child forked ahead (a spare), waiting on a socket of its own: a request goes to it with
its descriptors, and the next spare is forked after the reply, while the run goes on. A fork of an interpreter
costs about a millisecond here before the child's first line runs; with the spare it is off the run's path.
A spare is forked from the same state a fork at request time would copy, and runs nothing of the run's before
its request: it becomes the run's process exactly as a child forked then would.

The server exits when the supervisor closes its end, after its spare (told by the same end of file).
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import sys
import time

from lifeguard.child import joined, protocol
from lifeguard.child.readable import readable

TYPE_CHECKING = False  # typing itself costs the server's start-up; mypy knows this name
if TYPE_CHECKING:
    from typing import Any, NoReturn

MAX_MESSAGE = 1 << 20
SPARE_EXIT = 2.0  # seconds an unused spare has to exit at the server's end before it is killed


def _receive(sock: socket.socket, buffer: bytearray) -> tuple[bytes | None, list[int]]:
    """One request line (its JSON text) and its descriptors; (None, [...]) on EOF."""
    fds: list[int] = []
    while b"\n" not in buffer:
        data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(16 * array.array("i").itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[: len(payload) - (len(payload) % got.itemsize)])
                fds.extend(got)
        if not data:
            return None, fds
        buffer.extend(data)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line, fds


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


def _child(sock: socket.socket, wakeup: tuple[int, int], request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: become the run's process, run the body, exit as asked (never returns: the full
    exit raises SystemExit to the interpreter's top level)."""
    join = request.get(protocol.REQUEST_JOIN)
    if join:  # first of all, before anything of the run's can fork: nothing may start outside its cgroup
        try:
            with open(join, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            os.write(fds[2], f"lifeguard: the run could not join its cgroup {join}: {exc}\n".encode())
            os._exit(70)
    events_fd, out_fd, err_fd = fds
    sock.close()
    for fd in wakeup:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    joined.own_process_group()
    spec = request[protocol.REQUEST_SPEC]
    os.chdir(spec.get("workdir") or spec["run_dir"])  # a plain target works in the user's folder
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    # The events descriptor keeps its number; the child API finds it through the env.
    os.set_inheritable(events_fd, True)
    environ = os.environ  # set one by one: os.environ.update's generic mapping code costs copy-on-write faults
    for name, value in request[protocol.REQUEST_ENV].items():
        environ[name] = value
    environ[protocol.EVENTS_FD_ENV] = str(events_fd)
    from lifeguard.child import bootstrap

    if spec.get("exit") == "fast":
        code = 0
        try:
            bootstrap.run(spec)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        # Fast exit: no finalization, no atexit, no static destructors (said in each result).
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    bootstrap.run(spec)
    # Full finalization: return to the interpreter's top level and let it shut down.
    raise SystemExit(0)


def _spare(sock: socket.socket, wakeup: tuple[int, int]) -> tuple[int, socket.socket]:
    """Fork the next run's process ahead; in the server, (its pid, the socket its request goes to). The spare
    never returns: it becomes the run's process when its request comes, and exits at once when the server goes
    away before that."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid:
        theirs.close()
        return pid, ours
    ours.close()
    line, fds = _receive(theirs, bytearray())
    theirs.close()
    if line is None:
        os._exit(0)  # the server ended before a run came
    _child(sock, wakeup, json.loads(line), fds)


def _hand(spare: tuple[int, socket.socket], line: bytes, fds: list[int]) -> bool:
    """A request (its line as received, its descriptors) to the spare, whose socket is then closed; False if
    the spare is gone (killed while it waited). The descriptors stay ours to close."""
    try:
        spare[1].sendmsg([line + b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        return True
    except OSError:
        return False
    finally:
        spare[1].close()


def _end_spare(spare: tuple[int, socket.socket]) -> None:
    """The unused spare, told by end of file to exit, and reaped (killed if it does not within SPARE_EXIT)."""
    spare[1].close()
    deadline = time.monotonic() + SPARE_EXIT
    while True:
        try:
            if os.waitpid(spare[0], os.WNOHANG)[0] or time.monotonic() > deadline:
                break
        except ChildProcessError:
            return
        time.sleep(0.001)
    try:
        os.kill(spare[0], signal.SIGKILL)
        os.waitpid(spare[0], 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    import gc

    from lifeguard import child  # noqa: F401  (warm: imported once, shared by every run)
    from lifeguard.child import bootstrap, cores  # noqa: F401  (warm: imported once, shared by every run)

    if cores.pattern_is_local():  # read once here, and the module that turns cores on loaded, for every run
        import resource  # noqa: F401

    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buffer = bytearray()
    children: set[int] = set()
    spare = _spare(sock, (read_end, write_end))
    while True:
        ready = readable([sock.fileno(), read_end], None)
        if read_end in ready:
            os.read(read_end, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(sock, {protocol.SERVER_EXITED: pid, protocol.SERVER_STATUS: os.waitstatus_to_exitcode(status)})
        if sock.fileno() in ready:
            line, fds = _receive(sock, buffer)
            if line is None:  # the supervisor went away: so do we (running children are its to kill)
                _end_spare(spare)
                return
            while not _hand(spare, line, fds):  # killed while it waited: reaped, and a new one takes the run
                _end_spare(spare)
                spare = _spare(sock, (read_end, write_end))
            for descriptor in fds:
                os.close(descriptor)
            children.add(spare[0])
            _send(sock, {protocol.SERVER_STARTED: spare[0]})
            spare = _spare(sock, (read_end, write_end))
