"""pytest --lifeguard's session keeper: the tests run in a worker forked from the pytest process, so a crash of
pytest's own process (a fixture's teardown, a test lifeguard does not fork) fails the test it was in and the
session goes on, as pytest-xdist replaces a crashed worker.

At pytest_runtestloop the process forks. The worker runs the tests as pytest would and ends the session itself
(summary, junit.xml, lifeguard's report); the keeper waits and exits with its status. The worker writes a line
for each test it starts and each report it makes (pytest's own serialized form) to a file the keeper holds. If
the worker dies of a signal in a test, the keeper logs its finished reports (to every plugin but the terminal,
which printed them), an error for the phase the worker died in, and forks a new worker for the tests after it.
The worker parks its crashes (lifeguard.child.crash_park), so the error shows the native stack of the crash.
A report folder's runs of a dead worker move to ``DIR/workers/``, which the last worker merges, as pytest-xdist's
controller does. Under pytest-xdist, for --collect-only and in pytest.main() called by a program that goes on
after it, nothing changes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import posix
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pytest

from lifeguard.model.stacks import ProcessStacks, render_text

CONTINUED_KEY: pytest.StashKey[bool] = pytest.StashKey()  # this worker goes on with a crashed one's session
TestPhase = Literal["setup", "call", "teardown"]
PHASES: tuple[TestPhase, ...] = ("setup", "call", "teardown")
WORKER_LINE_LIMIT = 16 * 1024 * 1024  # a serialized report larger than this is not kept for a replay
NATIVE_LINES = 30  # of the crashed thread's stack, in the test's error (its Python frames are printed above)
LOOK_INTERVAL = 0.25  # seconds between looks for a crash parked in the worker
CRASH_HELP = ("the pytest process died of {signal} during this test's {phase}, which runs in pytest's own process "
              "(under --lifeguard only a test's body is forked){python}. lifeguard went on with the tests after it "
              "in a new process, as pytest-xdist replaces a crashed worker")
PYTHON_STACKS = "; faulthandler's Python stacks of it are above"


@dataclass
class WorkerLog:
    """What a dead worker wrote: the tests it finished (their reports) and the one it was in."""

    finished: list[list[dict[str, Any]]] = field(default_factory=list)
    current: str | None = None  # node id of the test in progress
    location: tuple[str, int | None, str] | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)  # the test in progress's reports so far

    @classmethod
    def read(cls, fd: int) -> WorkerLog:
        log = cls()
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by the crash
            if not isinstance(entry, dict):
                continue
            if entry.get("start"):
                log.current, log.reports = str(entry["start"]), []
                where = entry.get("location")
                log.location = (str(where[0]), where[1], str(where[2])) if isinstance(where, list) else None
            elif entry.get("finish") and log.current is not None:
                log.finished.append(log.reports)
                log.current, log.reports = None, []
            elif isinstance(entry.get("report"), dict):
                log.reports.append(entry["report"])
        return log


class WorkerChannel:
    """The worker's side: a line a test start, a report and a test end, in the file the keeper reads."""

    def __init__(self, config: pytest.Config, fd: int) -> None:
        self.config = config
        self.fd = fd

    def _write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, default=str).encode() + b"\n"
        if len(line) <= WORKER_LINE_LIMIT:
            os.write(self.fd, line)

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


def keeps(session: pytest.Session) -> bool:
    """Whether this session's tests run under a keeper: --lifeguard, pytest run as a command, not pytest-xdist,
    tests to run."""
    config = session.config
    return (sys.platform == "linux" and _pytest_is_the_program() and not hasattr(config, "workerinput")
            and not (getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") != "no")
            and not config.option.collectonly and bool(session.items)
            and not (session.testsfailed and not config.option.continue_on_collection_errors))


def _pytest_is_the_program() -> bool:
    """pytest runs as a command (its console_main: the process ends with the session), not as pytest.main() in
    a program that goes on after it: the keeper ends its process with the worker's status."""
    from _pytest.config import console_main

    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is console_main.__code__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def run_tests(session: pytest.Session, workers_folder: Path | None) -> bool | None:
    """pytest_runtestloop under a keeper: in a worker, its tests' loop; in the keeper, never returns when a
    worker's session ended on its own (it exits with its status), and True when it ends the session itself (no
    test left after a crash); None where no worker can be made (the tests run here)."""
    config = session.config
    items = list(session.items)
    crashes = 0
    while True:
        log_fd = _log_file()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = posix.fork()  # the real one, as for a forked test
        except OSError:
            os.close(log_fd)
            return None  # no worker: the tests run here, as without a keeper
        if pid == 0:
            _become_worker(session, items, log_fd)
            return _run(session, items)
        status, native = _wait(pid)
        log = WorkerLog.read(log_fd) if os.WIFSIGNALED(status) else WorkerLog()
        os.close(log_fd)
        if log.current is None:
            _end_as(status)  # the worker's session ended (or it died outside any test: as pytest alone would)
        crashes += 1
        config.stash[CONTINUED_KEY] = True  # its report folder's runs stay (this keeper's, the next worker's)
        _replay(config, log, os.WTERMSIG(status), native)
        if workers_folder is not None:
            _set_aside(workers_folder, crashes)
        done = next((at for at, item in enumerate(items) if item.nodeid == log.current), len(items) - 1)
        items = items[done + 1:]
        if not items or session.shouldfail or session.shouldstop:
            session.items = items
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
            return True


def _log_file() -> int:
    """An unnamed file both processes share: the worker appends, the keeper reads it after the worker ends."""
    import tempfile

    with tempfile.TemporaryFile() as made:
        return os.dup(made.fileno())


def _run(session: pytest.Session, items: list[pytest.Item]) -> bool:
    """pytest's own test loop over a worker's tests (without its check for collection errors: an error the
    keeper logged for a crashed test counts as one)."""
    for at, item in enumerate(items):
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[at + 1] if at + 1 < len(items) else None)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
    return True


def _become_worker(session: pytest.Session, items: list[pytest.Item], log_fd: int) -> None:
    from lifeguard.child import crash_park
    from lifeguard.proc.procfs import PR_SET_PDEATHSIG, libc

    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the worker never outlives its keeper
    if os.getppid() == 1:
        os._exit(1)  # the keeper died before the line above
    crash_park.install()  # a crash here waits for the keeper to read its stacks
    session.config.pluginmanager.register(WorkerChannel(session.config, log_fd), "lifeguard-keeper-channel")
    session.items = items


def _wait(pid: int) -> tuple[int, ProcessStacks | None]:
    """The worker's wait status and, when it crashed parked, its stacks; Ctrl-C is the worker's to handle (it
    ends its session and says so)."""
    from lifeguard.capture.native import available_hang_backends, capture_process
    from lifeguard.child.readable import readable
    from lifeguard.run.parked import ParkedCrashes

    backends = available_hang_backends()
    parked = ParkedCrashes(lambda pids: [capture_process(p, backends, thorough=True) for p in pids])
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        handle = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, next(iter(parked.stacks), None)
            if backends:
                parked.look([pid])
            if handle is not None:
                readable([handle], LOOK_INTERVAL)
            else:
                time.sleep(LOOK_INTERVAL / 10)
    finally:
        if handle is not None:
            os.close(handle)
        signal.signal(signal.SIGINT, previous)


def _end_as(status: int) -> None:
    """Exit as the worker did: its code, or its signal (a crash at its exit is pytest's own crash)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _replay(config: pytest.Config, log: WorkerLog, signum: int, native: ProcessStacks | None) -> None:
    """The dead worker's reports into this process's plugins and counts (the terminal printed them already),
    then the error of the test it died in, printed."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    quiet = config.pluginmanager.subset_hook_caller("pytest_runtest_logreport",
                                                    [terminal] if terminal is not None else [])
    for data in [report for reports in log.finished for report in reports] + log.reports:
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        if report is None:
            continue
        quiet(report=report)
        if terminal is not None:
            category = config.hook.pytest_report_teststatus(report=report, config=config)[0]
            terminal.stats.setdefault(category, []).append(report)
            reported = getattr(terminal, "_progress_nodeids_reported", None)
            if isinstance(reported, set):
                reported.add(report.nodeid)
    assert log.current is not None
    location = log.location or (log.current.split("::")[0], None, log.current)
    phases = [str(data.get("when")) for data in log.reports]
    phase: TestPhase = next((p for p in PHASES if p not in phases), "teardown")
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
    from _pytest.reports import TestReport

    text = CRASH_HELP.format(signal=name, phase=phase, python=PYTHON_STACKS if faulthandler.is_enabled() else "")
    if native is not None and native.signal is not None:
        crashed = tuple(t for t in native.threads if t.tid == native.signal.tid)
        text += "\n\nNative stack of the crash (read while it waited in lifeguard's fatal-signal handler):\n"
        lines = render_text([replace(native, threads=crashed, notes=())]).splitlines()
        text += "\n".join(lines[:NATIVE_LINES])
        if len(lines) > NATIVE_LINES:
            text += f"\n    ({len(lines) - NATIVE_LINES} more lines: the interpreter's frames down to main)"
    error = TestReport(log.current, location, {}, "failed", text, phase)
    config.hook.pytest_runtest_logreport(report=error)
    config.hook.pytest_runtest_logfinish(nodeid=log.current, location=location)


def _set_aside(workers_folder: Path, crashes: int) -> None:
    """A dead worker's streamed runs, moved where the last worker merges them (DIR/workers/crashed-N)."""
    results = workers_folder.parent / "results.jsonl"
    if results.is_file():
        folder = workers_folder / f"crashed-{crashes}"
        folder.mkdir(parents=True, exist_ok=True)
        results.replace(folder / "results.jsonl")
