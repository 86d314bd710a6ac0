"""The processes of a head start (lifeguard.run.headstart): the run's, forked and exec'd as Popen would start it,
and the watchdog's, forked beside it; and how both are ended when the head start is not used.

Standard library, lifeguard.child modules and lifeguard.proc.reap only, like lifeguard.run.headstart.
"""

from __future__ import annotations

import os

from lifeguard.child import protocol
from lifeguard.child.joined import own_process_group
from lifeguard.proc.reap import reap_within

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PIPE_SIZE = 1 << 20  # the output pipes hold this much while the relays are not reading yet
PR_SET_CHILD_SUBREAPER = 36
REAP_TIMEOUT = 5.0
EXEC_FAILED = 127
VARIANT = "default"  # a plain target's only variant (lifeguard.model.scenario.DEFAULT_VARIANT)


class HeadStart:
    """A run's process started before lifeguard was loaded, and what a normal start needs to take it over."""

    def __init__(self, argv: list[str], name: str, runs_dir: str, run_id: str, base_seed: int) -> None:
        import time

        self.argv = argv
        self.name = name
        self.runs_dir = runs_dir
        self.run_dir = os.path.join(runs_dir, f"{name}-{VARIANT}-0")
        self.run_id = run_id
        self.base_seed = base_seed
        self.cwd = os.getcwd()
        self.env: dict[str, str] = {}
        self.pid = 0
        self.started = time.monotonic()
        self.events_fd = -1
        self.out_read = self.out_write = self.err_read = self.err_write = -1
        self.watchdog: tuple[int, int] | None = None  # (pid, the write end of its pipe)
        self.outcome = "not claimed"  # what became of it, for ``lifeguard run -v``
        self.python = False  # the command is a Python interpreter or a script one runs

    def close_files(self) -> None:
        for name in ("events_fd", "out_read", "out_write", "err_read", "err_write"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)


def find(program: str) -> str | None:
    """Where exec finds ``program`` (PATH lookup as the normal start's), if it is an executable file."""
    candidates = [program] if os.sep in program else [os.path.join(d, program) for d in os.get_exec_path()]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None



def open_files(head: HeadStart) -> None:
    """The run's folder and result channel, and the pipes its output goes to (the relays read them later)."""
    os.mkdir(head.run_dir)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC | os.O_CLOEXEC
    head.events_fd = os.open(os.path.join(head.run_dir, protocol.EVENTS_FILE), flags, 0o644)
    head.out_read, head.out_write = os.pipe()
    head.err_read, head.err_write = os.pipe()
    if min(head.events_fd, head.out_read, head.out_write, head.err_read, head.err_write) < 3:
        raise OSError("a standard stream of lifeguard is closed")  # its number was reused: leave it to Popen
    _widen(head.out_write)
    _widen(head.err_write)


def spawn(head: HeadStart) -> None:
    """Start the watchdog, then the run's process with ``head.env``, and tell the watchdog of it first."""
    # This process becomes the subreaper (the run's orphans come to it) before the run's own code can fork.
    # A Python program's first code runs after its interpreter's start-up (tens of milliseconds), so for one
    # that is done while it starts: ctypes' import (milliseconds) is not the program's to wait for.
    python = head.python = is_python_program(find(head.argv[0]) or "")
    if not python:
        _become_subreaper()
    import resource  # the run's process needs it between fork and exec: imported here, before the fork

    head.watchdog = _start_watchdog()
    go_read, go_write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the run's process: only system calls until exec
        os.close(go_write)
        _become_run(head, parent, go_read, resource)
    os.close(go_read)
    head.pid = pid
    try:
        # The watchdog knows of the run before the run's own code starts: a lifeguard killed from here on
        # (even by the command itself) takes the run's whole tree with it. So no parent-death signal is
        # needed for the run's process (a normal start asks for one too).
        os.write(head.watchdog[1], f"run {pid} {head.run_id}\n".encode())
        os.write(go_write, b"g")
    finally:
        os.close(go_write)
    if python:
        _become_subreaper()


def _become_subreaper() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def is_python_program(path: str) -> bool:
    """Is the file ``path`` a Python interpreter, or a script one runs (a shebang naming python)? Also the
    normal start's test (lifeguard.run.containment.starts_python)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    if head.startswith(b"#!"):
        return b"python" in head.split(b"\n", 1)[0]
    return head.startswith(b"\x7fELF") and os.path.basename(os.path.realpath(path)).startswith("python")


def _widen(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, 1031, PIPE_SIZE)  # F_SETPIPE_SZ
    except (ImportError, OSError):
        pass  # the default 64 KiB: a program writing more before the relays read just waits a moment


def _become_run(head: HeadStart, parent: int, go: int, resource: Any) -> None:
    """In the forked child: what spawn's Popen(stdin=DEVNULL, pass_fds=(events,), restore_signals=True)
    does, then exec once the watchdog has been told of the run (``go`` gives a byte; end of file: the
    supervisor died first)."""
    try:
        import _signal as signal  # built in, without signal.py's enums (milliseconds before the exec)

        own_process_group()
        if os.read(go, 1) != b"g" or os.getppid() != parent:
            os._exit(EXEC_FAILED)  # the supervisor is already gone
        for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # Python ignores these; exec would keep them ignored
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        if soft != 0:  # no core in the user's folder (lifeguard.run.launch.no_inherited_cores)
            resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(head.out_write, 1)
        os.dup2(head.err_write, 2)
        os.set_inheritable(head.events_fd, True)  # as pass_fds makes it; every other descriptor closed
        os.closerange(3, head.events_fd)
        os.closerange(head.events_fd + 1, os.sysconf("SC_OPEN_MAX"))
        os.execvpe(head.argv[0], head.argv, head.env)
    except BaseException:
        pass
    os._exit(EXEC_FAILED)


def _start_watchdog() -> tuple[int, int]:
    """The watchdog (lifeguard.child.watchdog): its pid and the write end of its pipe. Forked from this process
    while it is still small and has no thread, it watches without starting an interpreter of its own (one
    would take a CPU from the command's start for milliseconds); niced, it never competes with the run."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # the terminal's Ctrl-C reaches the supervisor, never the watchdog
            os.nice(10)
            os.closerange(3, read_end)
            os.closerange(read_end + 1, os.sysconf("SC_OPEN_MAX"))
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            from lifeguard.child import watchdog

            with os.fdopen(read_end, "rb") as lines:
                watchdog.watch(lines, protocol.RUN_ID_ENV)
        except BaseException:
            pass
        os._exit(0)
    os.close(read_end)
    return pid, write_end


def end(head: HeadStart, *, keep_folder: bool = False) -> None:
    """Kill the head start's process and its session, reap it, close its files and its watchdog, and remove
    its runs' folder unless the session uses it (``keep_folder``)."""
    import signal

    if head.pid > 0:
        for kill in (os.killpg, os.kill):
            try:
                kill(head.pid, signal.SIGKILL)
            except OSError:
                pass
        reap_within(head.pid, REAP_TIMEOUT)
        head.pid = 0
    head.close_files()
    if head.watchdog is not None:
        pid, fd = head.watchdog
        head.watchdog = None
        os.close(fd)  # end of file: the watchdog kills what is left of the run, and exits
        reap_within(pid, REAP_TIMEOUT)
    if not keep_folder:
        import shutil

        shutil.rmtree(head.runs_dir, ignore_errors=True)
