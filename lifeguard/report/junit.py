"""junit.xml: one testcase per scenario x variant; a failure carries the evidence of its first unexpected run.

A child's control characters are shown as ``\\x1b``... (report.text.visible): XML 1.0 cannot carry them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lifeguard.model.outcomes import Verdict
from lifeguard.model.result import Session
from lifeguard.report.text import evidence_text, visible


def junit_xml(session: Session) -> str:
    """One testcase per scenario x variant; a failure carries the evidence."""
    not_run = [s for s in session.summaries if session.stopped and not s.runs]  # -x stopped before them
    suite = ET.Element("testsuite", name="lifeguard", tests=str(len(session.summaries)),
                       failures=str(sum(s.verdict is Verdict.UNEXPECTED and s not in not_run
                                        for s in session.summaries)),
                       skipped=str(len(not_run)), time=f"{session.duration:.3f}")
    for summary in session.summaries:
        case = ET.SubElement(suite, "testcase", classname=f"lifeguard.{summary.scenario}",
                             name=f"{summary.scenario}[{summary.variant}]", time=f"{summary.duration:.3f}")
        props = ET.SubElement(case, "properties")
        stats = summary.stats.to_dict() if summary.stats else {}
        for key, value in (("expected", summary.expected), ("runs", str(summary.runs)),
                           *((f"count.{o}", str(n)) for o, n in summary.counts.items()),
                           *((f"stats.{k}", str(v)) for k, v in stats.items() if v is not None)):
            ET.SubElement(props, "property", name=key, value=value)
        if summary in not_run:
            ET.SubElement(case, "skipped", message="not run: stopped at the first unexpected verdict (-x)")
        elif summary.verdict is Verdict.UNEXPECTED:
            counts = ", ".join(f"{n} {o}" for o, n in summary.counts.items()) or "no runs"
            failure = ET.SubElement(case, "failure", message=f"expected {summary.expected}, got {counts}")
            if summary.first_unexpected is not None:
                failure.text = visible(evidence_text(summary.first_unexpected))
        elif summary.first_failure is not None:
            ET.SubElement(case, "system-out").text = visible(evidence_text(summary.first_failure))
    if session.interrupted:
        # An interrupted session proves nothing: a CI page must not show it green.
        suite.set("errors", "1")
        suite.set("tests", str(len(session.summaries) + 1))
        case = ET.SubElement(suite, "testcase", classname="lifeguard", name="session")
        ET.SubElement(case, "error", message=f"interrupted after {session.finished} finished run(s); "
                                             "the rest did not run")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
