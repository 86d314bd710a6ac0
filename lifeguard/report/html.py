"""report.html: the same summaries and evidence as the terminal, as one self-contained page; every text in it
goes through report.escape.for_html (a child's controls and lone surrogates shown, then HTML-escaped)."""

from __future__ import annotations

import time

from lifeguard import __version__
from lifeguard.model.outcomes import Outcome, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session
from lifeguard.report.escape import for_html
from lifeguard.report.text import evidence_text

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
tr.unexpected td.verdict { color: #b00; font-weight: bold; }
tr.expected td.verdict { color: #070; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
.finding { border-left: 4px solid #b60; padding-left: 1em; margin: 1em 0; }
"""


def _cell(text: object, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{for_html(text)}</td>"


def _series_row(summary: SeriesSummary) -> str:
    counts = ", ".join(f"{n} {o}" for o, n in summary.counts.items()) or "no runs"
    bound = summary.stats.bound_text() if summary.stats else ""
    anchor = f"{summary.scenario}-{summary.variant}"
    name = for_html(f"{summary.scenario}[{summary.variant}]")
    link = f'<a href="#{for_html(anchor)}">{name}</a>' if summary.verdict is Verdict.UNEXPECTED else name
    return (f'<tr class="{summary.verdict.value}"><td>{link}</td>' + _cell(summary.expected) + _cell(summary.runs)
            + _cell(counts) + _cell(bound) + _cell(", ".join(summary.modes)) + _cell(summary.verdict.value, "verdict")
            + "</tr>")


def _evidence(result: RunResult) -> str:
    parts = []
    for finding in result.findings:
        frames = "".join(f"<li><code>{for_html(f)}</code></li>" for f in finding.frames[:12])
        parts.append(f'<div class="finding"><b>[{for_html(finding.kind)}]</b> '
                     f'{for_html(finding.summary)}<br><i>fix:</i> '
                     f'{for_html(finding.hint)}<ul>{frames}</ul></div>')
    parts.append(f"<pre>{for_html(evidence_text(result))}</pre>")
    return "\n".join(parts)


def render(session: Session) -> str:
    interp = session.interpreter
    rows = "\n".join(_series_row(s) for s in session.summaries)
    details = []
    for summary in session.summaries:
        if summary.verdict is Verdict.EXPECTED or summary.first_unexpected is None:
            continue
        anchor = for_html(f"{summary.scenario}-{summary.variant}")
        details.append(f'<h3 id="{anchor}">{for_html(summary.scenario)}[{for_html(summary.variant)}]: '
                       f"expected {for_html(summary.expected)}</h3>\n{_evidence(summary.first_unexpected)}")
    failed = sum(s.runs - s.counts.get("passed", 0) for s in session.summaries)
    bad = sum(1 for s in session.summaries if s.verdict is Verdict.UNEXPECTED)
    state = "interrupted" if session.interrupted else ("all as expected" if not bad else f"{bad} unexpected")
    errors = sum(s.counts.get(Outcome.ERROR.value, 0) for s in session.summaries)
    if errors:
        state += f", {errors} run(s) failed by lifeguard's own error"
    if session.failure:
        state += f", stopped early: {session.failure}"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.started))
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>lifeguard report</title><style>{STYLE}</style></head>
<body>
<h1>lifeguard report: {for_html(state)}</h1>
<p>lifeguard {__version__}, Python {for_html(interp.version_text)} ({for_html(interp.executable)}),
started {started}, {session.finished} runs ({failed} not passed) in {session.duration:.1f} s,
seed {session.base_seed}.</p>
<table>
<tr><th>scenario [variant]</th><th>expected</th><th>runs</th><th>outcomes</th><th>statistics</th><th>mode</th>
<th>verdict</th></tr>
{rows}
</table>
{"".join(details) if details else "<p>Every verdict is as expected.</p>"}
</body></html>
"""
