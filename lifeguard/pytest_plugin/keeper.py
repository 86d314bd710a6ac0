"""pytest --lifeguard's session keeper: the tests run in a worker forked from the pytest process, so a crash of
pytest's own process (a fixture's setup or teardown, a test lifeguard does not fork) fails the test it was in
and the session goes on, as pytest-xdist replaces a crashed worker.

When the session has started (its header printed), the process forks. The worker collects, runs the tests and
ends the session as pytest would (summary, junit.xml, lifeguard's report); the keeper waits and exits with its
status. The worker writes a line for each test it starts, each report it makes (pytest's own serialized form)
and each test it ends, to a file the keeper holds. If it dies of a signal in a test, the keeper forks a new
worker, which collects again, runs none of the tests the dead workers began, logs their reports to every plugin
but the terminal (which printed them) and into the terminal's counts, logs an error for the phase the crash
was in, then runs the rest. Each worker parks its crashes (lifeguard.child.crash_park), so that error carries
the native stack of the crash. A report folder's runs of a dead worker move to ``DIR/workers/``, which the last
worker merges, as pytest-xdist's controller does. Under pytest-xdist, for --collect-only and in pytest.main()
called by a program that goes on after it, nothing changes.
"""

from __future__ import annotations

import faulthandler
import os
import posix
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from lifeguard.model.result import signal_name
from lifeguard.model.stacks import ProcessStacks, render_text
from lifeguard.pytest_plugin.worker_log import WorkerLog, log_line, report_from_log

CONTINUED_KEY: pytest.StashKey[bool] = pytest.StashKey()  # this worker goes on with a crashed one's session
NATIVE_LINES = 30  # of the crashed thread's stack, in the test's error (its Python frames are printed above)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent: a terminal's Ctrl-C
LOOK_INTERVAL = 0.25  # seconds between looks for a crash parked in the worker
INTERRUPT_GRACE = 2.0  # seconds a worker has to show that a SIGINT sent to its group reached it
INTERRUPTED_LINE = b'{"interrupted": true}\n'  # what a worker writes when pytest sees its KeyboardInterrupt
CRASH_HELP = ("the pytest process died of {signal} during this test's {phase}, which runs in pytest's own process "
              "(under --lifeguard only a test's body is forked){python}. lifeguard went on with the tests after it "
              "in a new process, as pytest-xdist replaces a crashed worker")
PYTHON_STACKS = "; faulthandler's Python stacks of it are above"


class WorkerChannel:
    """The worker's side: a line a test start, a report and a test end, in the file the keeper reads."""

    def __init__(self, config: pytest.Config, fd: int) -> None:
        self.config = config
        self.fd = fd

    def _write(self, entry: dict[str, Any]) -> None:
        log_line(self.fd, entry)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self._write({"start": nodeid, "location": list(location)})

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        config = self.config
        self._write({"report": config.hook.pytest_report_to_serializable(config=config, report=report)})

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._write({"finish": nodeid})

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        os.write(self.fd, INTERRUPTED_LINE)  # the keeper need not pass on a SIGINT


@dataclass(frozen=True)
class Crash:
    """A worker that died in a test: what it wrote, the signal, the native stack read while it waited."""

    log: WorkerLog
    signum: int
    native: ProcessStacks | None


def keeps(config: pytest.Config) -> bool:
    """Whether this session's tests run under a keeper: pytest run as a command, not pytest-xdist's, tests to
    run (the caller checks --lifeguard)."""
    return (sys.platform == "linux" and hasattr(os, "pidfd_open") and _pytest_is_the_program()
            and not hasattr(config, "workerinput") and not config.option.collectonly
            and not (getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") != "no"))


def _pytest_is_the_program() -> bool:
    """pytest runs as a command (its console entry: the process ends with the session), not as pytest.main() in
    a program that goes on after it: the keeper ends its process with the worker's status."""
    import _pytest.config

    # console_main up to pytest 9.0; from 9.1 the command runs _console_main (console_main, deprecated, wraps it).
    entries = {entry.__code__ for entry in (getattr(_pytest.config, name, None)
                                            for name in ("_console_main", "console_main")) if entry is not None}
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code in entries:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def start(config: pytest.Config, workers_folder: Path | None) -> None:
    """At the end of the session's start: returns in each worker, which goes on with the session; the keeper
    never returns (it exits as the last worker did). Where no worker can be made, returns here."""
    crashes: list[Crash] = []
    keeper = os.getpid()
    while True:
        log_fd = _log_file()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = posix.fork()  # the real one, as for a forked test
        except OSError:
            os.close(log_fd)
            if not crashes:
                return  # the tests run here, as without a keeper
            os._exit(pytest.ExitCode.INTERNAL_ERROR)
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a worker after a crash: see _wait
            _become_worker(config, log_fd, crashes, keeper)
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        status, native = _wait(pid, log_fd)
        log = WorkerLog.read(log_fd) if os.WIFSIGNALED(status) else WorkerLog()
        os.close(log_fd)
        if log.current is None:
            _end_as(status)  # the worker's session ended (or it died outside any test: as pytest alone would)
        crashes.append(Crash(log, os.WTERMSIG(status), native))
        sys.stdout.write(f"\nlifeguard: pytest's process died of {signal_name(crashes[-1].signum)} in {log.current}; "
                         "a new one goes on with the tests after it\n")
        config.stash[CONTINUED_KEY] = True  # its report folder's runs stay
        if workers_folder is not None:
            _set_aside(workers_folder, len(crashes))


class Continuation:
    """A worker after a crash: the tests the dead workers began are collected but not run again, their reports
    logged quietly, the crashes' errors logged, then the rest runs."""

    def __init__(self, crashes: list[Crash]) -> None:
        self.crashes = crashes
        self.begun = {nodeid for crash in crashes for nodeid in crash.log.begun}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        config = session.config
        if (session.testsfailed and not config.option.continue_on_collection_errors) or config.option.collectonly:
            return None  # pytest's own loop stops the session (errors during collection)
        for crash in self.crashes:
            _replay(config, crash)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        return _run(session, [item for item in session.items if item.nodeid not in self.begun])


def _log_file() -> int:
    """An unnamed file both processes share: the worker appends, the keeper reads it after the worker ends."""
    import tempfile

    with tempfile.TemporaryFile() as made:
        return os.dup(made.fileno())


def _run(session: pytest.Session, items: list[pytest.Item]) -> bool:
    """pytest's own test loop over a worker's tests (without its check for collection errors: the error logged
    for a crashed test counts as one)."""
    for at, item in enumerate(items):
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[at + 1] if at + 1 < len(items) else None)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
    return True


def _become_worker(config: pytest.Config, log_fd: int, crashes: list[Crash], keeper: int) -> None:
    from lifeguard.child import crash_park
    from lifeguard.proc.procfs import PR_SET_PDEATHSIG, libc

    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the worker never outlives its keeper
    if os.getppid() != keeper:
        os._exit(1)  # the keeper died before the line above
    # A crash here waits for the keeper to read its stacks; faulthandler's Python stacks still go where pytest's
    # faulthandler plugin sends them (a copy of the terminal's stderr: descriptor 2 is captured during a test).
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    crash_park.install(faulthandler_file=config.stash.get(fault_handler_stderr_fd_key, 2))
    config.pluginmanager.register(WorkerChannel(config, log_fd), "lifeguard-keeper-channel")
    if crashes:
        config.pluginmanager.register(Continuation(crashes), "lifeguard-keeper-continuation")


def _wait(pid: int, log_fd: int) -> tuple[int, ProcessStacks | None]:
    """The worker's wait status and, when it crashed parked, its stacks; the stack readers are loaded only for a
    crash. SIGINT is the worker's to handle (it ends its session and says so): a terminal's Ctrl-C reaches it
    itself, and so may a signal sent to the process group; one the worker does not show it got within
    INTERRUPT_GRACE (sent to this process alone: kill -INT) is passed on, once."""
    from lifeguard.child.readable import readable
    from lifeguard.run.parked import ParkedCrashes

    def capture(pids: list[int]) -> list[ProcessStacks]:
        from lifeguard.capture.native import available_hang_backends, capture_process

        return [capture_process(p, available_hang_backends(), thorough=True) for p in pids]

    parked = ParkedCrashes(capture, main=pid)  # pytest's process has no lifeguard fork hook: no SIGTERM park
    handle = os.pidfd_open(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, next(iter(parked.stacks), None)
            parked.look([pid])
            sent = signal.sigtimedwait([signal.SIGINT], 0)
            if sent is not None and sent.si_code != SI_KERNEL and not _interrupted(pid, log_fd, handle):
                os.kill(pid, signal.SIGINT)
            readable([handle], LOOK_INTERVAL)
    finally:
        os.close(handle)


def _interrupted(pid: int, log_fd: int, handle: int) -> bool:
    """Whether the worker shows, within INTERRUPT_GRACE, that an interrupt reached it: it logs pytest's
    keyboard-interrupt hook, or it ends."""
    from lifeguard.child.readable import readable

    deadline = time.monotonic() + INTERRUPT_GRACE
    while time.monotonic() < deadline:
        size = os.fstat(log_fd).st_size
        if INTERRUPTED_LINE in os.pread(log_fd, 4096, max(0, size - 4096)) or readable([handle], 0.05):
            return True
    return False


def _end_as(status: int) -> None:
    """Exit as the worker did: its code, or its signal (a crash at its exit is pytest's own crash)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _replay(config: pytest.Config, crash: Crash) -> None:
    """A dead worker's reports into this process's plugins and counts (the terminal printed them already), then
    the error of the test it died in, printed."""
    log, signum, native = crash.log, crash.signum, crash.native
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    quiet = config.pluginmanager.subset_hook_caller("pytest_runtest_logreport",
                                                    [terminal] if terminal is not None else [])
    for data in [report for reports in log.finished for report in reports] + log.reports:
        report = report_from_log(config, data)
        if report is None:
            continue
        quiet(report=report)
        if terminal is not None:
            category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
            terminal.stats.setdefault(category, []).append(report)
            reported = getattr(terminal, "_progress_nodeids_reported", None)
            if isinstance(reported, set):  # pytest's progress counts it (private: where it is)
                reported.add(report.nodeid)
    assert log.current is not None
    location = log.location or (log.current.split("::")[0], None, log.current)
    phase = log.died_in
    from _pytest.reports import TestReport

    python = PYTHON_STACKS if faulthandler.is_enabled() else ""
    text = CRASH_HELP.format(signal=signal_name(signum), phase=phase, python=python)
    if native is not None and native.signal is not None:
        crashed = tuple(t for t in native.threads if t.tid == native.signal.tid)
        text += "\n\nNative stack of the crash (read while it waited in lifeguard's fatal-signal handler):\n"
        lines = render_text([replace(native, threads=crashed, notes=())]).splitlines()
        text += "\n".join(lines[:NATIVE_LINES])
        if len(lines) > NATIVE_LINES:
            text += f"\n    ({len(lines) - NATIVE_LINES} more lines: the interpreter's frames down to main)"
    error = TestReport(log.current, location, {}, "failed", text, phase)
    config.hook.pytest_runtest_logstart(nodeid=log.current, location=location)
    config.hook.pytest_runtest_logreport(report=error)
    config.hook.pytest_runtest_logfinish(nodeid=log.current, location=location)


def _set_aside(workers_folder: Path, crashes: int) -> None:
    """A dead worker's streamed runs, moved where the last worker merges them (DIR/workers/crashed-N)."""
    results = workers_folder.parent / "results.jsonl"
    if results.is_file():
        folder = workers_folder / f"crashed-{crashes}"
        folder.mkdir(parents=True, exist_ok=True)
        results.replace(folder / "results.jsonl")
