"""report.html: one self-contained page (no network, no server) rendered from the same result objects as every
other sink, through Jinja2 with autoescaping (templates/ beside this module).

What a reader sees first is the verdicts, unexpected series on top; then charts of each series' failure rate
and run times; then the evidence of the first failed runs of every series with failures; then every run in a
table that a small inline script pages and filters. Every text in it passes report.escape's control-character
handling (the ``shown`` filter, and the environment's ``finalize`` for any value a template forgets to
filter) before HTML escaping; the runs' table is one JSON array, escaped for a ``<script>`` element.
Jinja2 is imported only when a page is written; the charts are SVG drawn by report.html_charts.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeguard import __version__
from lifeguard.model.outcomes import Expectation, Outcome, Phase, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session, series_label
from lifeguard.model.run import RunKind
from lifeguard.model.scenario import Scenario
from lifeguard.report.escape import for_html, for_xml
from lifeguard.report.html_charts import OUTCOME_COLOURS, SeriesPoint, along_svg, chart_label, duration_svg, rate_svg

if TYPE_CHECKING:  # the evidence view reads the diagnosis tables: imported when a page is written
    from lifeguard.report.html_evidence import RunEvidence

TEMPLATES = Path(__file__).with_name("templates")
EVIDENCE_RUNS = 3  # failed runs of a series whose evidence the page shows (the first ones kept in memory)
CHART_SERIES = 40  # series drawn in the summary charts: the unexpected and failing ones first
ALONG_CHARTS = 12  # series with failures that get a chart of their outcomes along the series
# Runs listed in the table: every run that failed or was unexpected, passing ones up to this many rows
# (results.jsonl and report.json list every run); 10,000 runs make about 0.6 MB of table data.
TABLE_ROWS = 50_000
SOURCE_LINES = 60  # lines of a scenario body shown as "what ran"


@dataclass
class SeriesView:
    number: int
    summary: SeriesSummary
    label: str  # scenario[variant]
    what_ran: str = ""
    perturbations: set[str] = field(default_factory=set)
    durations: list[float] = field(default_factory=list)
    outcomes: list[tuple[int, str]] = field(default_factory=list)  # (index, outcome) of every run
    evidence: list[RunEvidence] = field(default_factory=list)
    along_svg: str | None = None
    finding: str = ""  # the first finding of the run its verdict rests on, for the verdict table
    culprit: str = ""  # that run's culprit frame

    def headline(self) -> None:
        """``finding`` and ``culprit`` from the evidence of the run the verdict rests on (else its first)."""
        rests_on = self.summary.first_unexpected or self.summary.first_failure
        chosen = next((e for e in self.evidence if rests_on is not None and e.result.index == rests_on.index),
                      self.evidence[0] if self.evidence else None)
        if chosen is None:
            return
        result = chosen.result
        self.finding = str(result.findings[0]) if result.findings else result.reason
        frames = [f.text for p in chosen.processes for t in p.threads if t.culprit for f in t.frames if f.culprit]
        wheres = [t.where for p in chosen.processes for t in p.threads if t.culprit and t.where]
        self.culprit = (frames or wheres or [""])[0]

    @property
    def anchor(self) -> str:
        return f"s{self.number}"

    @property
    def unexpected(self) -> bool:
        return self.summary.verdict is Verdict.UNEXPECTED

    @property
    def failed(self) -> int:
        return self.summary.runs - self.summary.counts.get(Outcome.PASSED.value, 0)

    @property
    def first_failure_text(self) -> str:
        stats = self.summary.stats
        if stats is None or stats.runs_to_first_failure is None:
            return ""
        seconds = stats.seconds_to_first_failure
        return f"run {stats.runs_to_first_failure}" + (f", after {seconds:.1f} s" if seconds is not None else "")


def _shown(value: object) -> Any:
    from markupsafe import Markup

    return Markup(for_html(value))


_SEPARATORS = re.compile(r"([_.:/\\\[\],\-=]+)")


def _breakable(value: object) -> Any:
    """A name shown as ``shown`` does, with a line break allowed after each separator (``_ . : / [ ] , - =``)
    and nowhere else: a long series name wraps between words, never mid-identifier."""
    from markupsafe import Markup

    pieces = _SEPARATORS.split(str(value))  # text, separators, text, ...: the separators at odd places
    return Markup("".join(for_html(piece) + ("<wbr>" if n % 2 else "") for n, piece in enumerate(pieces)))


def _finalize(value: object) -> object:
    """Every ``{{ value }}`` of the templates: a child's controls shown even where no filter was written
    (Markup, the page's own SVG and JSON, passes as it is)."""
    from markupsafe import Markup

    if value is None:
        return ""
    return value if isinstance(value, Markup) else for_xml(str(value))


def _environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, finalize=_finalize,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["shown"] = _shown
    env.filters["breakable"] = _breakable
    return env


def what_ran(scenario: Scenario | None) -> str:
    """The code or command a series ran, as the user would type or read it."""
    if scenario is None:
        return ""
    if scenario.kind is RunKind.CODE:
        return scenario.code or ""
    if scenario.kind is RunKind.MODULE:
        return shlex.join(["python", "-m", scenario.module, *scenario.argv[1:]])
    if scenario.kind is RunKind.SCRIPT:
        return shlex.join(["python", *scenario.argv]) if scenario.argv else scenario.path
    if scenario.kind is RunKind.COMMAND:
        return shlex.join(scenario.argv)
    return _body_source(scenario)


def _body_source(scenario: Scenario) -> str:
    """A scenario body's source from its file (the decorator's line on), or where it is when unreadable."""
    where = f"{scenario.where}: {scenario.function}"
    try:
        source = Path(scenario.path).read_text(encoding="utf-8", errors="replace")
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return where
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == scenario.function:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = source.splitlines()[start - 1: node.end_lineno]
            cut = f"\n# ... {len(lines) - SOURCE_LINES} more line(s) in {scenario.path}" \
                if len(lines) > SOURCE_LINES else ""
            return f"# {scenario.where}\n" + "\n".join(lines[:SOURCE_LINES]) + cut
    return where


def _ordered(session: Session) -> list[SeriesSummary]:
    """Unexpected series first, then those with failed runs (a buggy variant's expected crash), then the rest;
    the session's order within each."""
    def rank(summary: SeriesSummary) -> int:
        if summary.verdict is Verdict.UNEXPECTED:
            return 0
        return 1 if summary.runs - summary.counts.get(Outcome.PASSED.value, 0) else 2

    return sorted(session.summaries, key=rank)


class _Table:
    """The runs' table as compact rows, gathered from the stream of run dicts (results.jsonl read back)."""

    def __init__(self, series: dict[tuple[str, str], SeriesView], base: Path | None,
                 link: Callable[[str, Path | None], str]) -> None:
        self.series = series
        self.base = base
        self.link = link  # html_evidence.href: a path as the page links to it
        self.rows: list[list[Any]] = []
        self.not_listed = 0
        self.words: dict[str, int] = {}  # outcome, phase, mode and perturbation texts: each stored once
        self.expectations: dict[str, Expectation | None] = {}
        self.counts: dict[str, int] = {}

    def word(self, text: str) -> int:
        return self.words.setdefault(for_xml(text), len(self.words))

    def accepted(self, expected: str, outcome: Outcome, phase: str | None) -> bool:
        if expected not in self.expectations:
            try:
                self.expectations[expected] = Expectation.parse(expected)
            except ValueError:
                self.expectations[expected] = None
        expectation = self.expectations[expected]
        return expectation is not None and expectation.accepts(outcome, Phase(phase) if phase else None)

    def add(self, run: dict[str, Any]) -> None:
        view = self.series.get((str(run.get("scenario")), str(run.get("variant"))))
        if view is None:
            return
        outcome_text = str(run.get("outcome"))
        try:
            outcome = Outcome(outcome_text)
        except ValueError:
            outcome = Outcome.ERROR
        index = int(run.get("index", 0))
        duration = float(run.get("duration") or 0.0)
        perturbations = [str(p) for p in run.get("perturbations") or ()]
        view.perturbations.update(perturbations)
        view.durations.append(duration)
        view.outcomes.append((index, outcome.value))
        self.counts[outcome.value] = self.counts.get(outcome.value, 0) + 1
        accepted = self.accepted(str(run.get("expected", "")), outcome, run.get("phase"))
        if outcome is Outcome.PASSED and accepted and len(self.rows) >= TABLE_ROWS:
            self.not_listed += 1
            return
        folder = str(run.get("run_dir") or "")
        link = self.link(folder, self.base) + "/" if folder and outcome is not Outcome.PASSED else ""
        self.rows.append([view.number, index, self.word(outcome.value), self.word(str(run.get("phase") or "")),
                          round(duration, 3), run.get("seed", 0), self.word(str(run.get("mode", ""))),
                          self.word(", ".join(perturbations)), link, int(accepted)])

    def json(self, views: Iterable[SeriesView]) -> str:
        data = {"series": [[v.number, for_xml(v.label)] for v in views],
                "words": list(self.words), "rows": self.rows, "colours": OUTCOME_COLOURS,
                "columns": ["series", "index", "outcome", "phase", "duration", "seed", "mode", "perturbations",
                            "folder", "accepted"]}
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        # Inert inside <script type="application/json">: no "</script>", no "<!--", no entity.
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _evidence_runs(session: Session, summary: SeriesSummary) -> list[RunResult]:
    """The first failed runs of a series that the session still holds, and the run its verdict rests on."""
    key = (summary.scenario, summary.variant)
    found = {r.index: r for r in session.results if (r.scenario, r.variant) == key and r.outcome is not Outcome.PASSED}
    for extra in (summary.first_failure, summary.first_unexpected):
        if extra is not None:
            found.setdefault(extra.index, extra)
    chosen = [found[i] for i in sorted(found)[:EVIDENCE_RUNS]]
    shown = summary.first_unexpected
    if shown is not None and all(r.index != shown.index for r in chosen):
        chosen[-1:] = [shown]  # the run the verdict rests on is always there
    return chosen


def _state(session: Session) -> tuple[str, bool]:
    bad = sum(1 for s in session.summaries if s.verdict is Verdict.UNEXPECTED)
    state = "interrupted" if session.interrupted else (
        "all as expected" if not bad else f"{bad} unexpected of {len(session.summaries)} series")
    errors = sum(s.counts.get(Outcome.ERROR.value, 0) for s in session.summaries)
    if errors:
        state += f", {errors} run(s) failed by lifeguard's own error"
    if session.failure:
        state += f", stopped early: {session.failure}"
    return state, session.all_expected


def _run_dicts(session: Session) -> Iterator[dict[str, Any]]:
    for result in session.results:
        yield result.to_dict()


def render(session: Session, runs: Iterable[dict[str, Any]] | None = None, base: Path | None = None) -> str:
    """The page of ``session``. ``runs``: every run as results.jsonl holds it, in order (default: the runs
    the session kept in memory); ``base``: the report folder, which links to evidence are relative to."""
    from lifeguard.report.html_evidence import href, run_evidence

    scenarios = {s.name: s for s in session.scenarios}
    views = [SeriesView(n, s, series_label(s.scenario, s.variant)) for n, s in enumerate(_ordered(session), 1)]
    by_key = {(v.summary.scenario, v.summary.variant): v for v in views}
    table = _Table(by_key, base, href)
    for run in (_run_dicts(session) if runs is None else runs):
        table.add(run)
    failing = [v for v in views if v.failed or v.unexpected]
    for view in views:
        view.what_ran = what_ran(scenarios.get(view.summary.scenario))
        view.durations.sort()
        if view in failing:
            view.evidence = [run_evidence(r, base) for r in _evidence_runs(session, view.summary)]
            view.headline()
    # Statistics and charts only where there are several runs: a one-run series' rate and strip say nothing.
    for view in [v for v in failing if v.summary.runs > 1][:ALONG_CHARTS]:
        first = view.summary.stats.runs_to_first_failure if view.summary.stats else None
        view.along_svg = along_svg(f"Outcomes along {view.label}", sorted(view.outcomes),
                                   None if first is None else first - 1)
    drawn = (failing + [v for v in views if v not in failing])[:CHART_SERIES]
    points = [SeriesPoint(chart_label(v.number, v.label), v.summary.verdict.value, v.summary.stats.rate,
                          v.summary.stats.rate_low, v.summary.stats.rate_high, v.summary.stats.bound_text(),
                          v.durations) for v in sorted(drawn, key=lambda v: v.number)
              if v.summary.stats and v.summary.runs > 1]
    rate, duration = (rate_svg(points), duration_svg(points)) if points else (None, None)
    state, good = _state(session)
    from markupsafe import Markup

    interp = session.interpreter
    return str(_environment().get_template("report.html.j2").render(
        session=session, views=views, failing=failing, state=state, good=good, version=__version__,
        interp=interp, started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.started)),
        runs_total=session.finished, counts=sorted(table.counts.items(), key=lambda kv: list(OUTCOME_COLOURS).index(
            kv[0]) if kv[0] in OUTCOME_COLOURS else 99),
        colours=OUTCOME_COLOURS, rate_svg=Markup(rate) if rate else None,
        duration_svg=Markup(duration) if duration else None,
        charted=len(points), not_charted=len(views) - len(points), along_limit=ALONG_CHARTS,
        table_json=Markup(table.json(views)), not_listed=table.not_listed, listed=len(table.rows),
        collapse_expected=len(views) > 20, markup=Markup,
        repeated=any(v.summary.runs > 1 for v in views),
        modes=any(v.summary.modes not in ((), ("fresh",)) for v in views),
        perturbed=any(v.perturbations for v in views),
    ))


def page_environment() -> Any:
    """The templates' environment (autoescaping, the ``shown`` filter) for the other pages of a report folder."""
    return _environment()
