"""junit.xml: one testcase per scenario x variant; a failure carries the evidence of its first unexpected run.

Every text and attribute goes through report.escape.for_xml at the end: a child's control characters, lone
surrogates and U+FFFE/U+FFFF, which XML 1.0 cannot carry, are shown as ``\\x1b``, ``\\xff``..."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifeguard.model.outcomes import Outcome, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session, counts_text, series_label
from lifeguard.report.escape import for_xml
from lifeguard.report.text import evidence_text

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

MESSAGE_CHARS = 300  # a failure message's finding: one line, as a CI page shows it


def junit_xml(session: Session) -> str:
    """One testcase per scenario x variant; a failure carries the evidence."""
    # Imported here: series_properties serves every guarded test of the pytest plugin, which has no XML to write.
    import xml.etree.ElementTree as ET

    not_run = [s for s in session.summaries if session.stopped and not s.runs]  # -x stopped before them
    errored = {(s.scenario, s.variant) for s in session.summaries if s.counts.get(Outcome.ERROR.value)}
    suite = ET.Element("testsuite", name="lifeguard", tests=str(len(session.summaries)),
                       failures=str(sum(s.verdict is Verdict.UNEXPECTED and s not in not_run
                                        and (s.scenario, s.variant) not in errored
                                        for s in session.summaries)),
                       errors=str(len(errored)), skipped=str(len(not_run)), time=f"{session.duration:.3f}")
    for summary in session.summaries:
        case = ET.SubElement(suite, "testcase", classname=f"lifeguard.{summary.scenario}",
                             name=series_label(summary.scenario, summary.variant), time=f"{summary.duration:.3f}")
        if worth_properties(summary):
            props = ET.SubElement(case, "properties")
            for key, value in series_properties(summary):
                ET.SubElement(props, "property", name=key, value=value)
        own_error = _own_error(session, summary)
        if summary in not_run:
            ET.SubElement(case, "skipped", message="not run: stopped at the first unexpected verdict (-x)")
        elif own_error is not None:
            # lifeguard's own fault, not the scenario's: a JUnit error, as a broken fixture is for pytest.
            error = ET.SubElement(case, "error", message=f"lifeguard failed run {own_error.index}: {own_error.reason}")
            error.text = evidence_text(own_error)
        elif summary.verdict is Verdict.UNEXPECTED:
            failure = ET.SubElement(case, "failure", message=failure_message(summary))
            if summary.first_unexpected is not None:
                failure.text = evidence_text(summary.first_unexpected)
        elif summary.first_failure is not None:
            ET.SubElement(case, "system-out").text = evidence_text(summary.first_failure)
    if session.interrupted or session.failure:
        # An interrupted or stopped session proves nothing: a CI page must not show it green.
        why = "interrupted" if session.interrupted else f"stopped by lifeguard's own error ({session.failure})"
        suite.set("errors", str(len(errored) + 1))
        suite.set("tests", str(len(session.summaries) + 1))
        case = ET.SubElement(suite, "testcase", classname="lifeguard", name="session")
        ET.SubElement(case, "error", message=f"{why} after {session.finished} finished run(s); "
                                             "the rest did not run")
    _escape_tree(suite)
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def worth_properties(summary: SeriesSummary) -> bool:
    """A series whose properties say something: a run of it did not pass, or it ran several times (its
    statistics); a single passing run's would only repeat that it passed."""
    return summary.runs > 1 or summary.counts.get(Outcome.PASSED.value, 0) < summary.runs


def failure_message(summary: SeriesSummary) -> str:
    """A failed series' one line, as pytest's junit message is the assertion: what was expected and got, and
    the first finding (else the reason) of the run the verdict rests on."""
    message = f"expected {summary.expected}, got {counts_text(summary.counts)}"
    shown = summary.first_unexpected
    if shown is not None:
        said = str(shown.findings[0]) if shown.findings else shown.reason
        if said:
            message += f": {said.splitlines()[0][:MESSAGE_CHARS]}"
    return message


def series_properties(summary: SeriesSummary, *, prefix: bool = False) -> list[tuple[str, str]]:
    """A series' JUnit properties, the same names in lifeguard's junit.xml and in pytest's (the plugin):
    expected, verdict, runs, count.OUTCOME, stats.NAME, and outcome / phase / signal / findings of the first run that
    did not pass. ``prefix``: each name starts with the variant (a test with several)."""
    stats = summary.stats.to_dict() if summary.stats else {}
    pairs = [("expected", summary.expected), ("verdict", summary.verdict.value), ("runs", str(summary.runs)),
             *((f"count.{o}", str(n)) for o, n in summary.counts.items()),
             *((f"stats.{k}", str(v)) for k, v in stats.items() if v is not None)]
    shown = summary.first_unexpected or summary.first_failure
    if shown is not None and shown.outcome is not Outcome.PASSED:
        pairs += [("outcome", shown.outcome.value), ("phase", shown.phase.value if shown.phase else ""),
                  ("signal", shown.signal_name or "")]
        kinds = ", ".join(dict.fromkeys(f.kind for f in shown.findings))
        if kinds:
            pairs.append(("findings", kinds))
    return [(f"{summary.variant}.{k}" if prefix else k, v) for k, v in pairs]


def _own_error(session: Session, summary: SeriesSummary) -> RunResult | None:
    """The series' first run lifeguard itself failed (kept in full: a failure always is, up to the cap)."""
    if not summary.counts.get(Outcome.ERROR.value):
        return None
    for run in (summary.first_unexpected, summary.first_failure, *session.results):
        if run is not None and run.outcome is Outcome.ERROR and (run.scenario, run.variant) == (
                summary.scenario, summary.variant):
            return run
    return None


def _escape_tree(root: ET.Element) -> None:
    """Every text, tail and attribute value of the tree as XML 1.0 can carry it (names come from scenario
    files, texts from children: any of them may hold anything)."""
    for element in root.iter():
        if element.text:
            element.text = for_xml(element.text)
        if element.tail:
            element.tail = for_xml(element.tail)
        for key, value in element.attrib.items():
            element.set(key, for_xml(value))
