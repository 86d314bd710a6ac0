"""How a guarded or marked test's runs become what pytest reports: the test's outcome, the failure text,
the JUnit properties and the report section. Light (no engine): a forked test's verdict is given here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from lifeguard.child import protocol
from lifeguard.interpreter import Interpreter, resolve
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, counts_text, series_label
from lifeguard.pytest_plugin.assertions import outcome_text
from lifeguard.pytest_plugin.worker_log import report_from_log
from lifeguard.report.junit import series_properties, worth_properties
from lifeguard.report.text import evidence_text, summary_line

REPORT_SECTION = "lifeguard"


def interpreter() -> Interpreter:
    """This pytest's interpreter, as invoked (resolve keeps a virtualenv's ``bin/python``)."""
    return resolve(None)


def properties_of(summaries: list[SeriesSummary], report: Path | None) -> list[tuple[str, object]]:
    """JUnit ``<property>`` elements named as in lifeguard's own junit.xml, only where they say something
    (report.junit.worth_properties): on every passing test of a suite they made pytest's junit.xml several times
    its size."""
    told = [s for s in summaries if worth_properties(s)]
    properties: list[tuple[str, object]] = []
    for summary in told:
        properties.extend(series_properties(summary, prefix=len(summaries) > 1))
    if report is not None and told:
        properties.append(("report", str(report)))
    return properties


def user_properties(item: pytest.Item, summaries: list[SeriesSummary], report: Path | None, *,
                    section: bool = True) -> None:
    """The test's JUnit properties (properties_of), and (``section``) a report section with every series'
    verdict."""
    item.user_properties.extend(properties_of(summaries, report))
    if section:
        item.add_report_section("call", REPORT_SECTION, "\n".join(summary_line(s) for s in summaries))


class ForkedTestFailure(Exception):
    """A forked test that failed as it would have in pytest's own process: its report is pytest's (the
    ``pytest_runtest_makereport`` hook puts ``lifeguard_longrepr`` in place of this exception's)."""

    def __init__(self, longrepr: object) -> None:
        super().__init__("the forked test failed (pytest's report of it replaces this)")
        self.lifeguard_longrepr = longrepr


def save_pytest_report(item: pytest.Item, longrepr: object, path: Path) -> None:
    """In the forked test's child: pytest's report of the body's failure, serialized as pytest-xdist ships a
    worker's reports (``TestReport._to_json``); nothing where this pytest cannot."""
    import json

    try:
        from _pytest.reports import TestReport

        report = TestReport(item.nodeid, item.location, {}, "failed", longrepr, "call")  # type: ignore[arg-type]
        path.write_text(json.dumps(report._to_json()), errors="replace")
    except Exception:  # a pytest without that API, or a longrepr it cannot serialize: lifeguard's words then
        pass


def report_entry(config: pytest.Config, report: pytest.TestReport) -> dict[str, Any] | None:
    """A report a test's child made, as it goes to the process that logs it: serialized as pytest-xdist ships a
    worker's, with the count pytest's subtests keep of the test's failed ones (they fail the test itself)."""
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    if data is None:
        return None
    return {"report": data, "failed_subtests": failed_subtests(config).get(subtests_key(report), 0)}


def ship_logged_reports(item: pytest.Item, path: Path) -> None:
    """In the forked test's child: the reports its body logs itself (each subtest's, of pytest's ``subtests``
    or unittest's ``subTest``) go to ``path``, serialized as pytest-xdist ships a worker's, instead of to this
    copy of pytest's terminal, counters and plugins (a pytest-xdist worker's channel among them).
    replay_logged_reports logs them in pytest's process. A pytest whose hooks differ keeps its own way."""
    import json

    config = item.config

    def record(name: str, impls: Sequence[object], kwargs: Mapping[str, object], firstresult: bool) -> object:
        line = report_entry(config, kwargs["report"])  # type: ignore[arg-type]
        if line is not None:
            with open(path, "a", encoding="utf-8", errors="replace") as out:
                out.write(json.dumps(line) + "\n")
        return []

    try:
        hook: Any = config.pluginmanager.hook.pytest_runtest_logreport
        hook._hookexec = record  # pluggy's dispatch of this one hook, in this child only
    except AttributeError:
        pass


MAX_LOGGED_REPORTS = 10_000  # of one forked test's run


def replay_logged_reports(item: pytest.Item, path: Path, *, failed_only: bool = False) -> None:
    """In pytest's process: log the reports a forked test's body logged (ship_logged_reports), as plain pytest
    would have, so its terminal, exit code and junit.xml count every subtest. ``failed_only``: a repeated
    run's (the first run's are all logged, as one plain run's are; later runs add their failures)."""
    import contextlib
    import json

    if not path.is_file():
        return
    config = item.config
    capture = config.pluginmanager.getplugin("capturemanager")
    for line in path.read_text(errors="replace").splitlines()[:MAX_LOGGED_REPORTS]:
        try:
            logged = json.loads(line)
            report = report_from_log(config, logged["report"])
            failed = int(logged.get("failed_subtests", 0))
        except Exception:  # a line the child could not finish, or a report this pytest cannot read
            continue
        if report is None or (failed_only and not report.failed):
            continue
        counts, key = failed_subtests(config), subtests_key(item)
        counts[key] = max(counts.get(key, 0), failed)
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            item.ihook.pytest_runtest_logreport(report=report)


def failed_subtests(config: pytest.Config) -> dict[Any, int]:
    """pytest's count of each test's failed subtests (pytest >= 9 fails a test that has some), else {}: its own
    mapping, which the callers update (never a copy), keyed by subtests_key."""
    try:
        from _pytest.subtests import failed_subtests_key
    except ImportError:
        return {}
    found = config.stash.get(failed_subtests_key, None)
    return cast("dict[Any, int]", found) if found is not None else {}


def subtests_key(node: pytest.Item | pytest.TestReport) -> Any:
    """A test's key in failed_subtests: its structured id from pytest 9.2 (a NodeId, no str), else its nodeid."""
    return getattr(node, "id", None) or node.nodeid


def pytests_own_failure(summaries: Sequence[SeriesSummary]) -> ForkedTestFailure | None:
    """The failure to report in pytest's own words: every unexpected series failed by its body's exception
    only (outcome failed in phase run, no signal, finding, corruption or process left behind), with pytest's
    report of the first such run saved by its child; else None (lifeguard has something to say)."""
    import json

    unexpected = [s for s in summaries if s.verdict is Verdict.UNEXPECTED]
    runs = [s.first_unexpected for s in unexpected]
    if not unexpected or any(r is None or r.outcome is not Outcome.FAILED or r.phase is not Phase.RUN
                             or r.signal is not None or r.findings or r.corruption or r.leftover_processes
                             for r in runs):
        return None
    first = runs[0]
    assert first is not None
    try:
        from _pytest.reports import TestReport

        data = json.loads((Path(first.run_dir) / protocol.PYTEST_REPORT_FILE).read_text(errors="replace"))
        return ForkedTestFailure(TestReport._from_json(data).longrepr)
    except Exception:  # no saved report, or one this pytest cannot read: lifeguard's words then
        return None


def failure_text(summaries: list[SeriesSummary]) -> str:
    """What pytest shows (and JUnit keeps as the message) for a guarded test that failed: the outcome and the
    first finding's summary on the first line, then pytest's own report of a forked body's failure, then
    the evidence."""
    parts = []
    for summary in summaries:
        if summary.verdict is Verdict.EXPECTED:
            continue
        run = summary.first_unexpected
        if run is None:
            parts.append(f"lifeguard: {series_label(summary.scenario, summary.variant)} expected {summary.expected}, "
                         "got no runs")
            continue
        first = f"lifeguard: {outcome_text(run)}"
        if run.signal_name:
            first += f" ({run.signal_name})"
        if len(summaries) > 1:
            first += f" in variant {summary.variant}"
        if run.findings:
            first += f": [{run.findings[0].kind}] {run.findings[0].summary}"
        elif run.reason:
            first += f": {run.reason.splitlines()[0]}"
        first += f"  (expected {summary.expected}, got {counts_text(summary.counts)} in {summary.runs} run(s))"
        parts.append(first)
        failure = Path(run.run_dir) / protocol.PYTEST_FAILURE_FILE
        pytest_text = failure.read_text(errors="replace") if failure.is_file() else ""
        if pytest_text:
            parts.append(pytest_text.rstrip())
        if run.outcome is not Outcome.FAILED or run.findings or not pytest_text:
            parts.append(evidence_text(run))
    return "\n".join(parts)


def pytest_outcome_of(results: Sequence[RunResult]) -> None:
    """A body that called pytest.skip() or pytest.xfail() gives the test that outcome."""
    for result in results:
        for event in result.events:
            if event.name == protocol.PYTEST_OUTCOME:
                reason = str(event.get("reason", ""))
                if event.get("outcome") == "xfailed":
                    pytest.xfail(reason)
                skipped = pytest.skip.Exception(reason)
                skipped._use_item_location = True  # report the test's line, not this one
                raise skipped
