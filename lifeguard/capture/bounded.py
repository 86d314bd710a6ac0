"""The one way capture back ends run an external tool: bounded, in its own session, output to files.

gdb, pystack's reader and eu-stack all attach to a process of a hung run with ptrace. Any
of them can get stuck (a reader looping over damaged memory, a tracee in D state), and the
supervisor must never hang with it: the tool runs in a session of its own, its output goes
to temporary files (a pipe nobody drains could block it), and at the deadline its whole
group is killed. A tracer that dies detaches its tracees, but a tracee caught in the
attach's SIGSTOP may stay stopped, so the caller's ``on_timeout`` (``resume_stopped``)
runs after the tool has been reaped.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from lifeguard.child.readable import readable
from lifeguard.proc.procfs import STOPPED_STATES, children_of, process_state, read_proc
from lifeguard.proc.reap import reap_within

RESUME_ATTEMPTS = 3
KILLED_REAP = 5.0  # start_tool: a killed tool's exit is waited for this long at most


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """What one external tool process left: its output, and how it ended."""

    stdout: str
    stderr: str
    timed_out: bool
    returncode: int | None
    duration: float


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_timeout: Callable[[], None] | None = None,
) -> ToolRun:
    """Run ``argv`` to its end or to ``timeout`` seconds, whichever comes first.

    A tool that cannot be started comes back as a ToolRun with returncode None and the
    OSError in ``stderr``: a capture that could not run is data, not an exception.
    """
    started = time.monotonic()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        # Filled by start_tool the moment the Popen object exists: a Ctrl-C that lands anywhere after the fork,
        # even between start_tool's return and the assignment below, still finds the tool to end.
        made: list[subprocess.Popen[bytes]] = []
        timed_out = False
        try:
            try:
                process = start_tool(
                    list(argv),
                    made=made,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                )
            except OSError as error:
                return ToolRun("", f"cannot run {argv[0]}: {error}", False, None, time.monotonic() - started)
            _wait(process, timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(process.pid)
            process.wait()
            if on_timeout is not None:
                on_timeout()
        except BaseException:  # Ctrl-C while the tool runs: in a session of its own, it would outlive us
            for tool in made:
                pid = getattr(tool, "pid", None)
                if pid and getattr(tool, "_child_created", False):
                    kill_group(pid)
                    try:
                        tool.wait(timeout=KILLED_REAP)
                    except Exception:  # half made (interrupted inside Popen.__init__): start_tool reaped it
                        reap_within(pid, KILLED_REAP)
            raise
        return ToolRun(
            stdout=_read_all(stdout),
            stderr=_read_all(stderr),
            timed_out=timed_out,
            returncode=process.returncode,
            duration=time.monotonic() - started,
        )


def start_tool(argv: list[str], *, made: list[subprocess.Popen[bytes]] | None = None,
               **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, start_new_session=True, **popen)`` that leaves nothing behind when interrupted: a
    Ctrl-C that lands while Popen is still finishing, after its fork (on a loaded machine, while the tool already
    runs), would leave a tool in a session of its own with no Popen object to end it. The object is made first,
    so its pid is known whatever ``__init__`` raises; ``made`` gets it at once, for a caller that must end the
    tool if interrupted before this returns to it."""
    process: subprocess.Popen[bytes] = subprocess.Popen.__new__(subprocess.Popen)
    if made is not None:
        made.append(process)
    before = set(children_of(os.getpid()))
    try:
        process.__init__(argv, start_new_session=True, **popen)  # type: ignore[misc]
    except BaseException:
        pid = getattr(process, "pid", None)
        # An interrupt handled as the fork returns, before Popen stores the pid (seen on a loaded machine): the
        # tool is then the new child of ours that leads a session of its own.
        for tool in [pid] if pid else _new_session_leaders(before):
            kill_group(tool)
            reap_within(tool, KILLED_REAP)
        raise
    return process


def _new_session_leaders(before: set[int]) -> list[int]:
    found = []
    for pid in children_of(os.getpid()):
        info = read_proc(pid) if pid not in before else None
        if info is not None and info.sid == pid:
            found.append(pid)
    return found


def _wait(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for the tool's exit, woken by a pidfd the moment it exits.

    Popen.wait(timeout) polls with sleeps growing to 50 ms, which adds up to 50 ms to every
    0.2 s pystack read: a tenth of the per-process budget.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # Python or kernel without pidfds
        process.wait(timeout=timeout)
        return
    try:
        ready = readable([pidfd], timeout)
    finally:
        os.close(pidfd)
    if not ready:
        raise subprocess.TimeoutExpired(process.args, timeout)
    process.wait()


def _read_all(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read().decode(errors="replace")


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def resume_stopped(pid: int) -> None:
    """Undo a stop a killed tracer may leave behind.

    A tracer that dies detaches its tracees, and a tracee caught in the attach's SIGSTOP
    ends up stopped (or with the SIGSTOP still pending). SIGCONT resumes it and discards
    a pending stop; call it only after the tracer has been reaped.
    """
    for _ in range(RESUME_ATTEMPTS):
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            return
        if process_state(pid) not in STOPPED_STATES:
            return


def stderr_tail(stderr: str, lines: int = 5) -> str:
    """The last non-blank lines of a tool's stderr, on one line: what an error message quotes."""
    kept = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])
