"""``pytest --lifeguard`` in groups (the default mode): tests run together in one supervised child, pinned to
the one test that fails the child's life.

The pytest process (each pytest-xdist worker) runs no test itself. It holds the tests pytest hands it and,
at the end of the session or when a group's worth is held (about GROUP_SECONDS of tests, by the time the tests
of earlier groups took), forks one child for all of them (lifeguard.run.fork_here):
the child runs each test's whole protocol (setup, call, teardown) as plain pytest would, one after the other
in one process, writes pytest's own reports of them to a log this process reads, and then ends through the
real exit (atexit, finalization, C++ static destructors). This process supervises it like any run, with a
deadline per test (each test's start in the log + its timeout), and then logs the reports: an ordinary
failure, skip or xfail is pytest's own report, word for word.

When the child's life fails, the group is taken apart until each failure has one test:
- a crash or a hang in a test: that test fails with the evidence; the tests after it run in a new child, and
  those before it again, since their exit was not seen;
- a failed exit (a crash or hang after the last test, a failed finalization, a process left behind): the
  group is split in two halves, each run again from this process's clean state, down to the one test whose
  run alone fails so (bisection). Every test is reported once, from the child whose whole life was seen.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.model.scenario import DEFAULT_TIMEOUT, DEFAULT_VARIANT
from lifeguard.model.survey import PYTEST_FAILED, probe_failed_note, probe_note
from lifeguard.pytest_plugin.group_child import group_body
from lifeguard.pytest_plugin.guard import (
    RawEcho,
    faulthandler_timer_paused,
    foreign_threads,
    interrupted_at,
    scenario_for,
    test_timeout,
)
from lifeguard.pytest_plugin.session_report import SessionRecord
from lifeguard.pytest_plugin.settings import Settings
from lifeguard.pytest_plugin.verdicts import (
    REPORT_SECTION,
    failed_subtests,
    failure_text,
    interpreter,
    properties_of,
    subtests_key,
)
from lifeguard.pytest_plugin.worker_log import TestPhase, WorkerLog, report_from_log
from lifeguard.run.fork_here import run_in_fork
from lifeguard.session.evidence_hooks import capture_hang, explain_failure

# A group's size: tests that take about GROUP_SECONDS together, measured on the groups before (the first has
# GROUP_TESTS), within GROUP_BOUNDS. A child costs ~30 ms of fork, exit and supervision; a failed exit costs a
# bisection of about twice the group's time.
GROUP_SECONDS = 2.0
GROUP_TESTS = 200
GROUP_BOUNDS = (8, 1000)
# A part of a group whose exit hung, run to find the test that leaves the hang: its exit's deadline (the test
# found is run alone with its whole timeout, which gives its verdict). A deadlock at exit never ends; a
# bisection of 200 tests waits it out about 8 times.
LOCATING_EXIT = 10.0
GROUPS_FOLDER = "groups"  # runs_root/groups/N: the evidence of a group of several tests
NOTHING_RAN = ("lifeguard: the child of this test's group ended cleanly without a line of its log (no test began): "
               "lifeguard's own failure; run it with --lifeguard-mode fork")


@dataclass
class Settled:
    """One test's part of a group child whose life was seen: pytest's reports of it (serialized, as logged),
    the warnings it raised, and lifeguard's run when it is the test that failed the child's life."""

    item: pytest.Item
    reports: list[dict[str, Any]]
    warnings: list[dict[str, Any]] = field(default_factory=list)
    failed: RunResult | None = None
    phase: TestPhase | None = None  # the phase a test died in (a crash or hang in its body), else None
    group: RunResult | None = None  # the clean group run a passing test was part of
    failed_subtests: int = 0  # pytest's count of them in the child


def _settled(log: WorkerLog, item: pytest.Item, reports: list[dict[str, Any]], **verdict: Any) -> Settled:
    """``item``'s part of the child whose log is ``log``: ``reports``, and what the log kept of it besides."""
    return Settled(item, reports, log.warnings_of(item.nodeid), failed_subtests=log.failed_subtests.get(item.nodeid, 0),
                   **verdict)


class GroupLog:
    """The group child's log, read as it grows: the test in progress and when it started, for the deadline."""

    def __init__(self, fd: int, timeouts: dict[str, float], exit_timeout: float) -> None:
        self.fd = fd
        self.timeouts = timeouts
        self.exit_timeout = exit_timeout
        self.offset = 0
        self.current: str | None = None
        self.since: float | None = None  # the current test's start, or the last test's end

    def deadline(self, deadline: float) -> float:
        """The deadline in force (supervise.MovingDeadline): the test in progress's start + its timeout; after
        a test, the end of the last one + the exit's time; the run's own ``deadline`` before the first test
        starts."""
        size = os.fstat(self.fd).st_size
        if size > self.offset:
            data = os.pread(self.fd, size - self.offset, self.offset)
            complete = data.rfind(b"\n") + 1  # a line cut by the child's write is read whole next time
            for line in data[:complete].split(b"\n"):
                if line.startswith(b'{"start"') or line.startswith(b'{"finish"'):
                    entry = json.loads(line)
                    self.current = entry.get("start")
                    self.since = float(entry["at"])
            self.offset += complete
        if self.since is None:
            return deadline
        if self.current is not None:
            return self.since + self.timeouts.get(self.current, DEFAULT_TIMEOUT)
        return self.since + self.exit_timeout


class GroupRunner:
    """The tests pytest hands this process under --lifeguard, held and run in groups (see the module's
    docstring)."""

    def __init__(self, config: pytest.Config, settings: Settings, record: SessionRecord) -> None:
        self.config = config
        self.settings = settings
        self.record = record
        self.pending: list[pytest.Item] = []
        self.timeouts: dict[str, float] = {}
        self.runs = 0
        # Under a probe a test costs more (a fork, a second run): the first group is small, its time sizes the next.
        self.group_size = GROUP_TESTS if settings.probe is None else GROUP_BOUNDS[0]
        self._indices: dict[str, int] = {}  # node id -> index in the session's tests (pytest-xdist's worker)

    def add(self, item: pytest.Item, nextitem: pytest.Item | None, pytest_timeout: float | None) -> None:
        """A test pytest would run now: held, and the held ones run when the group is full or the last."""
        self.timeouts[item.nodeid] = test_timeout(self.settings, pytest_timeout)
        self.pending.append(item)
        if nextitem is None or len(self.pending) >= self.group_size:
            self.flush()

    def flush(self) -> None:
        """Run the held tests and report each, in order; stop where pytest's session would (-x, --maxfail)."""
        items, self.pending = self.pending, []
        for settled in self._settle(items):
            self._report(settled)
            if settled.item.session.shouldfail or settled.item.session.shouldstop:
                break

    # --- running ----------------------------------------------------------------------------------------------

    def _settle(self, items: list[pytest.Item], *, locating: bool = False) -> Iterator[Settled]:
        """Each test's reports from a child whose life was seen whole (run again, split, as needed), in order.
        ``locating``: a part of a group whose exit failed, run to find the test that fails it, which is then run
        alone for the evidence; a run of several tests then reads no stacks and makes no diagnosis."""
        if not items:
            return
        result, log = self._run(items, quick=locating and len(items) > 1)
        if not locating and log.finished and result.duration > 0:
            each = result.duration / len(log.finished)
            self.group_size = max(GROUP_BOUNDS[0], min(GROUP_BOUNDS[1], int(GROUP_SECONDS / each)))
        by_id = {item.nodeid: item for item in items}
        done = dict(zip(log.finished_ids, log.finished, strict=True))
        if log.current is not None and log.current in by_id:  # died (crashed, hung) in a test
            at = items.index(by_id[log.current])
            yield from self._settle(items[:at])  # their exit was not seen
            note = (f"the test ran in a process that ran {at} test(s) before it, as plain pytest would "
                    f"({', '.join(i.nodeid for i in items[:at][-3:])}{', ...' if at > 3 else ''})") if at else ""
            notes = (note,) if note else ()
            phase = log.died_in
            if log.probing is not None:  # the test passed; the probe after it failed (pytest's call shows it)
                notes, phase = (*notes, probe_failed_note(log.probing)), "call"
            failed = replace(result, notes=(*result.notes, *notes)) if notes else result
            yield _settled(log, by_id[log.current], log.reports, failed=failed, phase=phase)
            yield from self._settle(items[at + 1:])
            return
        if result.outcome is Outcome.PASSED and done:
            seen = replace(result, notes=(*result.notes, (
                f"passed in one process with the {len(done) - 1} other test(s) of its group "
                f"({len(done)}, from {items[0].nodeid}), whose whole life, exit included, was seen clean")))
            for item in items:
                if item.nodeid in done:
                    probed = log.probed.get(item.nodeid)
                    own = replace(seen, notes=(*seen.notes, probe_note(probed))) if probed else seen
                    yield _settled(log, item, done[item.nodeid], group=own)
            missing = [item for item in items if item.nodeid not in done]
            if missing and len(missing) < len(items):  # the child stopped early (-x): pytest decides on them
                yield from self._settle(missing)
            return
        if not done:  # the child failed before its first test began: lifeguard's own failure, on the first
            yield Settled(items[0], [], [], result, "setup")
            yield from self._settle(items[1:])
            return
        if len(items) == 1:
            yield _settled(log, items[0], done.get(items[0].nodeid, []), failed=result)
            return
        half = len(items) // 2  # the exit failed: which half leaves it (each run again from a clean copy)?
        parts = [*self._settle(items[:half], locating=True), *self._settle(items[half:], locating=True)]
        if parts and not any(part.failed is not None for part in parts):
            parts[-1] = replace(parts[-1], failed=_combined(result, items), group=None)
        yield from parts

    def _run(self, items: list[pytest.Item], *, quick: bool = False) -> tuple[RunResult, WorkerLog]:
        """One child for ``items``: its classified run and its log (``quick``: its outcome only, no stacks read,
        no diagnosis)."""
        self.runs += 1
        first = items[0]
        record = self.record
        record.open()
        if len(items) == 1:
            run_dir = record.folder_of(first.nodeid) / f"run-{self.runs}"
            scenario = scenario_for(first, self.timeouts[first.nodeid], 1)
            name, replay = scenario.name, scenario.replay or ""
        else:
            run_dir = record.runs_root / GROUPS_FOLDER / str(self.runs)
            name, replay = f"{first.nodeid} and {len(items) - 1} more test(s)", ""
        spec = RunSpec(scenario=name, variant=DEFAULT_VARIANT, index=0, kind=RunKind.FUNCTION, path=str(first.path),
                       function=getattr(first, "originalname", first.name), code=None, interpreter=interpreter(),
                       timeout=self.timeouts[first.nodeid], run_dir=run_dir, expected="passed",
                       mode=StartMode.PYTEST_FORK, replay=replay, cores=not quick)
        with tempfile.TemporaryFile() as made:
            log_fd = os.dup(made.fileno())
        try:
            exit_timeout = max(self.timeouts[i.nodeid] for i in items)
            watch = GroupLog(log_fd, self.timeouts, min(exit_timeout, LOCATING_EXIT) if quick else exit_timeout)
            live = RawEcho() if self.config.getoption("capture", "fd") == "no" else None
            threads = foreign_threads()
            try:
                body = group_body(items, log_fd, self.settings.probe)
                with faulthandler_timer_paused(self.config):
                    forked = run_in_fork(spec, body, capture_hooks=() if quick else (capture_hang,), live=live,
                                         meanwhile=lambda: record.meanwhile(run_dir, None), moving=watch.deadline)
            except KeyboardInterrupt:
                current = WorkerLog.read(log_fd).current
                interrupted = next((item for item in items if item.nodeid == current), None)
                if interrupted is not None:
                    interrupted_at(interrupted, run_dir)
                raise
            result = forked if quick else explain_failure(spec, forked)
            if threads:
                result = replace(result, notes=(*result.notes, (
                    f"forked while pytest's process ran other threads ({', '.join(threads[:5])}): the child has none "
                    "of them, so a hang on a lock one of them held would be the fork's, not the test's")))
            log = WorkerLog.read(log_fd)
        finally:
            os.close(log_fd)
        if result.outcome is Outcome.PASSED:
            record.discard(run_dir)
        return result, log

    # --- reporting --------------------------------------------------------------------------------------------

    def _report(self, settled: Settled) -> None:
        """A settled test into this process's hooks, as pytest's own protocol logs a test it ran."""
        item = settled.item
        config = self.config
        hook = item.ihook
        reports = []
        for data in settled.reports:
            report = report_from_log(config, data)
            if report is not None:
                reports.append(report)
        if settled.failed is not None and settled.failed.outcome is Outcome.PASSED:  # never lost silently
            reports = _with_failure(item, reports, NOTHING_RAN, [], "setup")
        elif settled.failed is not None:
            scenario = scenario_for(item, self.timeouts.get(item.nodeid, DEFAULT_TIMEOUT), 1)
            failed = replace(settled.failed, scenario=scenario.name, replay=scenario.replay or "")
            summaries = self.record.add(scenario, [failed])
            properties = properties_of(summaries, self.record.report_dir)
            reports = _with_failure(item, reports, failure_text(summaries), properties, settled.phase)
        elif settled.group is not None and self.record.report_dir is not None:  # only a report folder lists it
            scenario = scenario_for(item, self.timeouts.get(item.nodeid, DEFAULT_TIMEOUT), 1)
            self.record.add(scenario, [_own_run(settled.group, scenario.name, scenario.replay or "", reports)])
        if settled.failed_subtests:
            counts, key = failed_subtests(config), subtests_key(item)
            counts[key] = max(counts.get(key, 0), settled.failed_subtests)
        capture = config.pluginmanager.getplugin("capturemanager")
        hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext(), \
                self._xdist_at(item):
            for report in reports:
                hook.pytest_runtest_logreport(report=report)
            for entry in settled.warnings:
                _replay_warning(hook, entry)
        hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    @contextlib.contextmanager
    def _xdist_at(self, item: pytest.Item) -> Iterator[None]:
        """A pytest-xdist worker sends each report with the index of the test it runs now, and checks that they
        agree; the held tests' reports come later, so for their length its index is theirs (its private
        ``item_index``, where it is what this expects)."""
        worker = self._xdist_worker
        if worker is None:
            yield
            return
        if not self._indices:
            self._indices = {test.nodeid: n for n, test in enumerate(item.session.items)}
        before = worker.item_index
        worker.item_index = self._indices.get(item.nodeid, before)
        try:
            yield
        finally:
            worker.item_index = before

    @functools.cached_property
    def _xdist_worker(self) -> Any:
        if not hasattr(self.config, "workerinput"):
            return None
        return next((plugin for plugin in self.config.pluginmanager.get_plugins()
                     if type(plugin).__name__ == "WorkerInteractor" and isinstance(getattr(plugin, "item_index", None),
                                                                                     int)), None)


def _own_run(group: RunResult, name: str, replay: str, reports: list[pytest.TestReport]) -> RunResult:
    """A test's run in a group whose life was clean, as lifeguard's report lists it: failed in its body when
    pytest failed it (as its own child's run would have), else passed."""
    own = replace(group, scenario=name, replay=replay, duration=sum(float(r.duration) for r in reports))
    failing = next((r for r in reports if r.failed), None)
    if failing is None:
        return own
    crash = getattr(failing.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "").split("\n", 1)[0]
    return replace(own, outcome=Outcome.FAILED, phase=Phase.RUN, exit_code=1,
                   reason=PYTEST_FAILED.format(when=failing.when, message=message).rstrip(": "))


def _combined(result: RunResult, items: list[pytest.Item]) -> RunResult:
    """A group's failed exit that no part of it shows alone (the tests together leave it, or it is flaky)."""
    named = ", ".join(item.nodeid for item in items[:5]) + (", ..." if len(items) > 5 else "")
    return replace(result, notes=(*result.notes, (
        f"the exit of a process that ran these {len(items)} tests failed so ({named}); run again in halves, "
        "neither half alone did: the tests together leave it, or it does not happen every time")))


def _with_failure(item: pytest.Item, reports: list[pytest.TestReport], text: str,
                  properties: list[tuple[str, object]], phase: TestPhase | None) -> list[pytest.TestReport]:
    """The test's reports with lifeguard's failure: the call's (or the phase it died in) fails with lifeguard's
    evidence; pytest's own failure of it, if any, stays as pytest wrote it, the evidence beside it."""
    when: TestPhase = phase or "call"
    at = next((n for n, report in enumerate(reports) if report.when == when), None)
    if at is not None and reports[at].failed:
        reports[at].sections.append((f"{REPORT_SECTION} {when}", text))  # beside pytest's own failure
    else:
        call = pytest.CallInfo.from_call(lambda: pytest.fail(text, pytrace=False), when=when)
        failure = item.ihook.pytest_runtest_makereport(item=item, call=call)
        if at is not None:
            failure.sections = list(reports[at].sections)
            failure.duration = reports[at].duration
            reports[at] = failure
        else:
            reports.append(failure)
    last = reports[-1]
    last.user_properties = [*last.user_properties, *properties]
    return reports


def _replay_warning(hook: Any, entry: dict[str, Any]) -> None:
    """A warning the child caught in a test, into pytest's warnings summary."""
    category: type[Warning] = UserWarning
    found = getattr(builtins, str(entry.get("category")), None)
    if isinstance(found, type) and issubclass(found, Warning):
        category = found
    message = warnings.WarningMessage(category(str(entry.get("message"))), category, str(entry.get("filename")),
                                      int(entry.get("lineno") or 0))
    hook.pytest_warning_recorded.call_historic(kwargs={"warning_message": message, "when": "runtest",
                                                       "nodeid": str(entry.get("nodeid")), "location": None})


def runner_of(config: pytest.Config, settings: Settings, record: SessionRecord) -> GroupRunner:
    runner: GroupRunner | None = config.stash.get(RUNNER_KEY, None)
    if runner is None:
        runner = config.stash[RUNNER_KEY] = GroupRunner(config, settings, record)
    return runner


RUNNER_KEY: pytest.StashKey[GroupRunner] = pytest.StashKey()
