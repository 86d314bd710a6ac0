"""``pytest --lifeguard``: a test's body in a supervised child forked from this process.

The pytest process (each pytest-xdist worker: one server a worker) is the warm fork-server: pytest, the
conftests and the test module are imported, and the test's fixtures, whatever their scope, are set up here
as pytest does it. At the call phase the process forks (lifeguard.run.fork_here): the child runs the item's
own ``runtest()`` (so test functions, unittest cases and doctests alike, and async tests through their
plugin) and then exits as a process does, while this process supervises it like any run and turns the
verdict into the test's outcome. Teardown runs here afterwards.

What differs from plain pytest, by construction: what the body changes in memory (a module global, an
object a session fixture returned) is the child's, and is gone when the child ends; the next test sees the
fixture as setup left it. Warnings and log records of the body are in the child's output, not in pytest's
warnings summary or log report.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from lifeguard.child import emit, protocol
from lifeguard.model.outcomes import Outcome, Verdict
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.model.scenario import DEFAULT_TIMEOUT, DEFAULT_VARIANT, Scenario
from lifeguard.pytest_plugin.session_report import SessionRecord
from lifeguard.pytest_plugin.settings import GuardMode, Settings, runs_in_shard
from lifeguard.pytest_plugin.verdicts import (
    failure_text,
    interpreter,
    pytest_outcome_of,
    pytests_own_failure,
    replay_logged_reports,
    save_pytest_report,
    ship_logged_reports,
    user_properties,
)
from lifeguard.run.fork_here import run_in_fork
from lifeguard.run.relay import joined_pumps
from lifeguard.session.evidence_hooks import capture_hang, explain_failure

FAILURE_TEXT_LIMIT = 256 * 1024  # of pytest's own report of a body's failure
SHOWN_OUTPUT_LIMIT = 1024 * 1024  # of a run's stdout / stderr handed to pytest's capture
# Threads of the harness itself (lifeguard's relays; pytest-xdist's channel to its controller, which is a thread
# Python does not list): they hold no lock a forked test could need. Those running when the session started are
# the harness's; lifeguard's own are named.
HARNESS_THREAD_PREFIX = "lifeguard-"
_baseline: list[tuple[int, weakref.WeakSet[threading.Thread]]] = []


def _native_threads() -> int:
    """This process's kernel threads, but for relay pumps joined already whose tasks have not exited yet."""
    try:
        tasks = {int(task) for task in os.listdir("/proc/self/task")}
    except OSError:
        return 0
    return len(tasks - joined_pumps())


def note_harness_threads() -> None:
    """Called as a session starts: the threads running now are the harness's (the objects, not their idents,
    which a new thread may reuse)."""
    _baseline[:] = [(_native_threads(), weakref.WeakSet(threading.enumerate()))]


def foreign_threads() -> list[str]:
    """Threads of this process other than the harness's: a fork copies none of them, so a forked test that
    needs one (or a lock one holds) would hang where plain pytest would not."""
    native_before, python_before = _baseline[0] if _baseline else (1, weakref.WeakSet())
    known = len(python_before)
    names = [thread.name for thread in threading.enumerate()
             if thread not in python_before and not thread.name.startswith(HARNESS_THREAD_PREFIX)]
    python_now = threading.active_count()
    extra_native = (_native_threads() - python_now) - (native_before - known)
    if extra_native > 0:  # threads started by native code since (an extension's thread pool)
        names.append(f"{extra_native} native thread(s)")
    return names


class RawEcho:
    """LiveOutput for ``-s``: the child's bytes straight to this process's descriptors, as they come."""

    def write(self, spec: RunSpec, stream: str, data: bytes) -> None:
        fd = 1 if stream == "stdout" else 2
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass

    def close(self, spec: RunSpec) -> None:
        pass


def scenario_for(item: pytest.Item, timeout: float, repeat: int) -> Scenario:
    """The test as a lifeguard scenario: its node id, one variant, expected to pass."""
    nodeid = item.nodeid
    path, line = str(item.path), (item.location[1] or 0) + 1
    replay = f"{shlex.quote(sys.executable)} -m pytest {shlex.quote(nodeid)} --lifeguard"
    return Scenario(name=nodeid, function=getattr(item, "originalname", item.name), path=path, line=line,
                    fixture=None, expect={DEFAULT_VARIANT: "passed"}, timeout=timeout, repeat={"*": repeat},
                    description=nodeid, kind=RunKind.FUNCTION, replay=replay)


def _body(item: pytest.Item, run_dir: Path, runtest: Callable[[], object]) -> Callable[[], int]:
    """What the child runs: the item's own runtest(); a failure is written as pytest reports it."""

    def body() -> int:
        ship_logged_reports(item, run_dir / protocol.PYTEST_LOGGED_FILE)
        try:
            runtest()
            return 0
        except BaseException as exc:
            if isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)):
                outcome = "xfailed" if isinstance(exc, pytest.xfail.Exception) else "skipped"
                emit(protocol.PYTEST_OUTCOME, outcome=outcome, reason=str(getattr(exc, "msg", "") or exc))
                return 0
            emit(protocol.BODY_ERROR, error=f"{type(exc).__name__}: {exc}"[:1000])
            try:
                longrepr = item.repr_failure(pytest.ExceptionInfo.from_exception(exc))
                text = str(longrepr)
            except Exception:  # pytest could not format it: Python's own traceback
                import traceback

                longrepr, text = None, "".join(traceback.format_exception(exc))
            (run_dir / protocol.PYTEST_FAILURE_FILE).write_text(text[-FAILURE_TEXT_LIMIT:], errors="replace")
            if longrepr is not None:
                save_pytest_report(item, longrepr, run_dir / protocol.PYTEST_REPORT_FILE)
            return 1

    return body


@contextlib.contextmanager
def faulthandler_timer_paused(config: pytest.Config) -> Iterator[None]:
    """pytest's faulthandler_timeout arms faulthandler's watchdog thread around each test; a process forked while
    it is armed has the watchdog's lock held by a thread it does not have, and its finalization waits for that
    lock for ever (faulthandler cancels the timer there). Around a fork of ours the timer is off, and armed again
    as pytest armed it after: lifeguard's deadline bounds the test meanwhile."""
    try:
        timeout = float(config.getini("faulthandler_timeout") or 0)
    except (ValueError, TypeError):  # pytest's faulthandler plugin is off
        timeout = 0.0
    stderr = _faulthandler_file(config) if timeout > 0 else None
    if stderr is None:
        yield
        return
    import faulthandler

    faulthandler.cancel_dump_traceback_later()
    try:
        yield
    finally:
        faulthandler.dump_traceback_later(timeout, file=stderr)


def _faulthandler_file(config: pytest.Config) -> Any:
    """Where pytest's faulthandler writes (its stash, private: a descriptor in pytest 8, a file in 7), or None."""
    from _pytest import faulthandler as plugin

    for name in ("fault_handler_stderr_fd_key", "fault_handler_stderr_key"):
        key = getattr(plugin, name, None)
        if key is not None and key in config.stash:
            return config.stash[key]
    return None


def run_forked(item: pytest.Item, runtest: Callable[[], object], record: SessionRecord, *, timeout: float,
               repeat: int, note: str = "", next_test: str | None = None) -> None:
    """Run the item's body ``repeat`` times, each in a child forked from here; fail, skip or pass the test
    by the verdict. ``next_test``: the node id of the test pytest runs next, whose folder is made meanwhile."""
    scenario = scenario_for(item, timeout, repeat)
    indices = runs_in_shard(item.nodeid, repeat, record.shard)
    if not indices:
        pytest.skip(f"lifeguard shard {record.shard_text}: none of this test's {repeat} run(s)")
    record.open()
    folder = record.folder_of(item.nodeid)
    capture = item.config.getoption("capture", "fd")
    live = RawEcho() if capture == "no" else None
    results: list[RunResult] = []
    for index in indices:
        run_dir = folder / f"run-{index + 1}"
        spec = RunSpec(scenario=scenario.name, variant=DEFAULT_VARIANT, index=index, kind=RunKind.FUNCTION,
                       path=scenario.path, function=scenario.function, code=None, interpreter=interpreter(),
                       timeout=timeout, run_dir=run_dir, expected="passed", mode=StartMode.PYTEST_FORK,
                       replay=scenario.replay or "")
        try:
            with faulthandler_timer_paused(item.config):
                forked = run_in_fork(spec, _body(item, run_dir, runtest), capture_hooks=(capture_hang,), live=live,
                                     own_streams=capture == "sys",
                                     meanwhile=partial(record.meanwhile, run_dir, next_test),
                                     reuse=record.spare(run_dir))
        except KeyboardInterrupt:
            interrupted_at(item, run_dir)
            raise
        result = explain_failure(spec, forked)
        if note:
            result = replace(result, notes=(*result.notes, note))
        replay_logged_reports(item, run_dir / protocol.PYTEST_LOGGED_FILE, failed_only=bool(results))
        results.append(result)
        if live is None:
            _show_output(result)
        if result.outcome is Outcome.PASSED:
            record.discard(run_dir)
    summaries = record.add(scenario, results)
    own = pytests_own_failure(summaries)
    user_properties(item, summaries, record.report_dir, section=own is None)
    if own is not None:  # an ordinary failure, nothing of lifeguard's to add: in pytest's own words
        raise own
    if any(summary.verdict is Verdict.UNEXPECTED for summary in summaries):
        pytest.fail(failure_text(summaries), pytrace=False)
    pytest_outcome_of(results)


def interrupted_at(item: pytest.Item, run_dir: Path) -> None:
    """A Ctrl-C while a forked test ran: raise it again from the line the test's child was at (its Python stacks,
    dumped as supervision ended), so that pytest's "KeyboardInterrupt" line names the test's line instead of
    lifeguard's wait. A frame of the test's own file first, else the innermost of code someone wrote; nothing
    when the child left no dump."""
    from lifeguard.capture.faulthandler import parse_faulthandler
    from lifeguard.model.stacks import is_user_file

    frames = []
    for dump in sorted(run_dir.iterdir() if run_dir.is_dir() else ()):
        if not protocol.is_faulthandler_file(dump.name):
            continue
        try:
            frames += [f for stack in parse_faulthandler(dump.read_text(errors="replace")).values() for f in stack]
        except OSError:
            continue
    placed = [f for f in frames if f.file is not None and f.line is not None]
    test_file = str(item.path)
    at = next((f for f in placed if f.file == test_file), None) or next(
        (f for f in placed if is_user_file(f.file)), None)
    if at is None or at.file is None or at.line is None:
        return
    # A frame at that file and line: pytest shows the innermost frame of the interrupt's traceback.
    code = compile("\n" * (at.line - 1) + "raise KeyboardInterrupt", at.file, "exec")
    try:
        exec(code, {"__name__": at.function or "test"})
    except KeyboardInterrupt as again:
        again.__suppress_context__ = True
        raise


def _show_output(result: RunResult) -> None:
    """The child's output into this process's streams, where pytest's capture shows it with the test."""
    for text, stream in ((result.stdout_tail, sys.stdout), (result.stderr_tail, sys.stderr)):
        if text:
            stream.write(text[-SHOWN_OUTPUT_LIMIT:])
            stream.flush()


def fresh_refusal(item: pytest.Item) -> str | None:
    """Why a new interpreter cannot run the test (not a plain test function, or an argument that cannot be
    sent to it), or None when it can."""
    from lifeguard.errors import MarkerError
    from lifeguard.pytest_plugin.marker import is_plain_body
    from lifeguard.pytest_plugin.runner import check_sendable

    if not isinstance(item, pytest.Function) or not is_plain_body(getattr(item, "obj", None)):
        return (f"--lifeguard-mode fresh: {item.nodeid} is not a plain test function (a doctest, a unittest case, "
                "an async or generator test): a new interpreter cannot run it (--lifeguard-mode fork or auto forks "
                "it)")
    try:
        for name in item._fixtureinfo.argnames:  # the names pytest passes (pytest keeps them privately)
            check_sendable(name, item.funcargs[name], item.nodeid)
    except MarkerError as exc:
        return str(exc)
    return None


def test_timeout(settings: Settings, pytest_timeout: float | None) -> float:
    """A guarded test's deadline: --lifeguard-timeout (or the default), or pytest-timeout's when smaller."""
    timeout = settings.timeout or DEFAULT_TIMEOUT
    return min(timeout, pytest_timeout) if pytest_timeout is not None else timeout


def run_guarded(item: pytest.Item, runtest: Callable[[], object], settings: Settings, record: SessionRecord,
                *, pytest_timeout: float | None, next_test: str | None = None) -> None:
    """An unmarked test under --lifeguard, forked or in a new interpreter as ``--lifeguard-mode`` says
    (``next_test``: see run_forked)."""
    timeout = test_timeout(settings, pytest_timeout)
    repeat = settings.repeat or 1
    if settings.mode is GuardMode.FRESH:  # asked for: a test that cannot run so is refused, naming why
        _run_fresh(item, settings, record, timeout, repeat)
        return
    threads = foreign_threads()
    if settings.mode is GuardMode.AUTO and threads and fresh_refusal(item) is None:
        _run_fresh(item, settings, record, timeout, repeat)
        return
    note = ""
    if threads:
        note = (f"forked while pytest's process ran other threads ({', '.join(threads[:5])}): the child has none "
                "of them, so a hang on a lock one of them held would be the fork's, not the test's")
    run_forked(item, _checked(item, runtest), record, timeout=timeout, repeat=repeat, note=note,
               next_test=next_test)


def _run_fresh(item: pytest.Item, settings: Settings, record: SessionRecord, timeout: float, repeat: int) -> None:
    from lifeguard.errors import MarkerError
    from lifeguard.pytest_plugin.marker import MarkerOptions
    from lifeguard.pytest_plugin.runner import run_marked_test

    refusal = fresh_refusal(item)
    if refusal is not None:
        raise MarkerError(refusal)
    assert isinstance(item, pytest.Function)  # (fresh_refusal said so)
    options = MarkerOptions(timeout=timeout, repeat={"*": repeat}, expect={DEFAULT_VARIANT: "passed"},
                            fixture=None, timeout_given=True, repeat_given=True)
    run_marked_test(item, options, settings, record)


def _checked(item: pytest.Item, runtest: Callable[[], object]) -> Callable[[], object]:
    """A unittest case does not raise from runtest(): its failures are kept on the item (a private list of
    pytest's unittest support, ``_excinfo``); the first one is raised, as pytest would report it."""

    def run() -> object:
        result = runtest()
        kept = getattr(item, "_excinfo", None)
        if kept:
            raise kept[0].value
        return result

    return run
