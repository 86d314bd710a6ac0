"""report.html's charts: Vega-Lite specifications rendered to inline SVG when the page is written, offline
(vl-convert, the ``lifeguard[html]`` extra), so the page needs no script library, no CDN and no network.

Without the extra every chart is None and the page says how to get them; the figures stay in its tables.
The library is imported only here, when a page is written: ``import lifeguard`` and a run without
``--report`` never load it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lifeguard.report.escape import for_xml

INSTALL_HINT = "pip install 'lifeguard[html]'"
SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # a name inside the spec, never fetched
# Outcome colours, the same in every chart and in the page's badges (report.css).
OUTCOME_COLOURS = {"passed": "#2e7d32", "failed": "#ef6c00", "crashed": "#c62828", "hung": "#6a1b9a",
                   "corrupted": "#8d6e63", "error": "#212121"}
VERDICT_COLOURS = {"unexpected": "#c62828", "expected": "#2e7d32"}
LABEL_CHARS = 60  # a pytest node id can be long: the axis shows its start, the table the whole name
DURATIONS_PER_SERIES = 4000  # a box plot drawn from at most this many runs of a series (evenly spaced)
ROW_PIXELS = 18


@dataclass(frozen=True)
class SeriesPoint:
    """What the summary charts draw of one series."""

    label: str  # unique on the page ("3. name[variant]")
    verdict: str
    rate: float
    low: float
    high: float
    bound: str
    durations: Sequence[float]


def chart_label(number: int, name: str) -> str:
    text = for_xml(name)
    if len(text) > LABEL_CHARS:
        text = text[: LABEL_CHARS - 1] + "\u2026"
    return f"{number}. {text}"


def _base(title: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$schema": SCHEMA, "title": {"text": title, "anchor": "start", "fontSize": 13},
            "data": {"values": values}, "config": {"font": "sans-serif", "view": {"stroke": None}}}


def rate_spec(points: Sequence[SeriesPoint]) -> dict[str, Any]:
    """Each series' failure rate (a dot) and its 95% Wilson interval (a bar), coloured by verdict."""
    values = [{"series": p.label, "rate": p.rate, "low": p.low, "high": p.high, "verdict": p.verdict,
               "bound": p.bound} for p in points]
    y = {"field": "series", "type": "nominal", "sort": None, "title": None,
         "axis": {"labelLimit": 420}}
    x = {"type": "quantitative", "scale": {"domain": [0, 1]}, "axis": {"format": "%"},
         "title": "failure rate, 95% confidence interval"}
    colour = {"field": "verdict", "type": "nominal", "title": "verdict",
              "scale": {"domain": list(VERDICT_COLOURS), "range": list(VERDICT_COLOURS.values())}}
    return {**_base("Failure rate of each series", values), "width": 360, "height": {"step": ROW_PIXELS},
            "layer": [
                {"mark": {"type": "rule", "strokeWidth": 3, "opacity": 0.6},
                 "encoding": {"y": y, "x": {**x, "field": "low"}, "x2": {"field": "high"}, "color": colour}},
                {"mark": {"type": "point", "filled": True, "size": 60},
                 "encoding": {"y": y, "x": {**x, "field": "rate"}, "color": colour,
                              "tooltip": [{"field": "series"}, {"field": "bound"}]}},
            ]}


def _spread(durations: Sequence[float], limit: int) -> list[float]:
    if len(durations) <= limit:
        return list(durations)
    step = len(durations) / limit
    return [durations[int(n * step)] for n in range(limit)]


def duration_spec(points: Sequence[SeriesPoint]) -> dict[str, Any]:
    """Each series' run times as a box plot (whiskers at the minimum and maximum); a log axis when the
    runs span more than two orders of magnitude (a 0.05 s pass beside a 30 s hang)."""
    pairs = [(p.label, max(d, 1e-4)) for p in points for d in _spread(p.durations, DURATIONS_PER_SERIES)]
    values = [{"series": label, "seconds": d} for label, d in pairs]
    seconds = [d for _, d in pairs] or [1.0]
    log = max(seconds) / min(seconds) > 100
    x = {"field": "seconds", "type": "quantitative", "title": "run time, seconds" + (" (log scale)" if log else ""),
         "scale": {"type": "log"} if log else {"zero": True}}
    return {**_base("Run time of each series", values), "width": 360, "height": {"step": ROW_PIXELS},
            "mark": {"type": "boxplot", "extent": "min-max", "size": 12},
            "encoding": {"y": {"field": "series", "type": "nominal", "sort": None, "title": None,
                               "axis": {"labelLimit": 420}},
                         "x": x, "color": {"value": "#546e7a"}}}


def along_spec(title: str, outcomes: Sequence[tuple[int, str]], first_failure: int | None) -> dict[str, Any]:
    """The outcomes along one series, by run number in bins (one bar a run up to 60 runs), with a line
    at its first failure: which runs failed, and whether failures cluster."""
    values = [{"run": index + 1, "outcome": outcome} for index, outcome in outcomes]
    runs = max((index + 1 for index, _ in outcomes), default=1)
    step = 1 if runs <= 60 else math.ceil(runs / 60)
    seen = {outcome for _, outcome in outcomes}
    present = [o for o in OUTCOME_COLOURS if o in seen]
    bars = {"mark": {"type": "bar", "binSpacing": 0},
            "encoding": {"x": {"field": "run", "type": "quantitative", "bin": {"step": step, "extent": [1, runs + 1]},
                               "title": f"run number ({'one run' if step == 1 else f'{step} runs'} a bar)",
                               "axis": {"format": "d", "tickMinStep": 1}},
                         # One run a bar: every bar is 1 high, its colour says it all (no axis).
                         "y": {"aggregate": "count", "type": "quantitative", "title": "runs",
                               "axis": None if step == 1 else {"format": "d", "tickMinStep": 1}},
                         "color": {"field": "outcome", "type": "nominal", "title": "outcome",
                                   "scale": {"domain": present,
                                             "range": [OUTCOME_COLOURS[o] for o in present]}}}}
    layers: list[dict[str, Any]] = [bars]
    if first_failure is not None:
        layers.append({"data": {"values": [{"run": first_failure + 1}]},
                       "mark": {"type": "rule", "strokeDash": [4, 3], "color": "#000"},
                       "encoding": {"x": {"field": "run", "type": "quantitative"}}})
    return {**_base(for_xml(title), values), "width": 520, "height": 40 if step == 1 else 90, "layer": layers}


class Charts:
    """Renders specs to SVG text, or says why it cannot (the extra is missing, or the renderer failed)."""

    def __init__(self) -> None:
        try:
            import vl_convert  # the lifeguard[html] extra: only where a page is written
        except ImportError:
            self.converter: Any = None
            self.missing = f"Charts need the html extra: {INSTALL_HINT}"
        else:
            self.converter = vl_convert
            self.missing = ""

    def svg(self, spec: dict[str, Any]) -> str | None:
        if self.converter is None:
            return None
        try:
            return str(self.converter.vegalite_to_svg(spec))
        except Exception as exc:  # a chart the renderer refuses loses the chart, not the page
            self.missing = f"a chart could not be drawn ({type(exc).__name__}: {exc})"
            return None
