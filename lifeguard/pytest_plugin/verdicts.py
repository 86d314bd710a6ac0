"""How a guarded or marked test's runs become what pytest reports: the test's outcome, the failure text,
the JUnit properties and the report section. Light (no engine): a forked test's verdict is given here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from lifeguard.child import protocol
from lifeguard.interpreter import Interpreter, resolve
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, counts_text, series_label
from lifeguard.pytest_plugin.assertions import outcome_text
from lifeguard.report.junit import series_properties, worth_properties
from lifeguard.report.text import evidence_text, summary_line

REPORT_SECTION = "lifeguard"


def interpreter() -> Interpreter:
    """This pytest's interpreter, as invoked (resolve keeps a virtualenv's ``bin/python``)."""
    return resolve(None)


def user_properties(item: pytest.Item, summaries: list[SeriesSummary], report: Path | None, *,
                    section: bool = True) -> None:
    """JUnit ``<property>`` elements named as in lifeguard's own junit.xml, and (``section``) a report section
    with every series' verdict. Properties only for a test some run of which did not pass: on every passing
    test of a suite they made pytest's junit.xml several times its size and said nothing."""
    told = [s for s in summaries if worth_properties(s)]
    for summary in told:
        item.user_properties.extend(series_properties(summary, prefix=len(summaries) > 1))
    if report is not None and told:
        item.user_properties.append(("report", str(report)))
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
