"""report.html's charts: Vega-Lite specifications rendered to inline SVG when the page is written, offline
(vl-convert, the ``lifeguard[html]`` extra), so the page needs no script library, no CDN and no network.

Without the extra every chart is None and the page says how to get them; the figures stay in its tables.
The library is loaded only in a child process that draws a page's charts (Charts.render): ``import
lifeguard``, a run without ``--report``, and the supervisor itself never load it.
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
                   "corrupted": "#8d6e63", "not exercised": "#757575", "error": "#212121"}
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


# The renderer runs in a child of this interpreter, with a deadline: its JavaScript engine takes some 60 MB that
# would otherwise stay in the supervisor (or in a pytest process) after the page is written, and a renderer
# that hangs or crashes loses the charts, not the page. It reads the specs as one JSON list on stdin and writes
# one SVG (or the first line of its error: the rest is the renderer's own JavaScript stack) for each.
RENDER_TIMEOUT = 120.0  # seconds for every chart of a page (a 10,000-run page takes about 2 s)
RENDER_CHILD = """
import json, sys
import vl_convert
out = []
for spec in json.load(sys.stdin):
    try:
        out.append(vl_convert.vegalite_to_svg(spec))
    except Exception as exc:
        out.append({"error": type(exc).__name__ + ": " + (str(exc).splitlines() or [""])[0]})
json.dump(out, sys.stdout)
"""
ERROR_CHARS = 300


class Charts:
    """Renders specs to SVG text in one child process, or says why it cannot (``missing``: the extra is not
    installed, or the renderer failed)."""

    def __init__(self) -> None:
        import importlib.util

        try:
            found = importlib.util.find_spec("vl_convert") is not None
        except (ImportError, ValueError):  # a module set to None (tests) or a broken parent package
            found = False
        self.missing = "" if found else f"Charts need the html extra: {INSTALL_HINT}"

    def render(self, specs: Sequence[dict[str, Any]]) -> list[str | None]:
        """One SVG text for each of ``specs``, None where none could be drawn."""
        if not specs or self.missing:
            return [None] * len(specs)
        import json
        import os
        import signal
        import subprocess
        import sys

        try:
            child = subprocess.Popen([sys.executable, "-c", RENDER_CHILD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self.missing = f"the charts could not be drawn: {exc}"
            return [None] * len(specs)
        try:
            out, err = child.communicate(json.dumps(specs).encode(), timeout=RENDER_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(RENDER_TIMEOUT)
            for stream in (child.stdin, child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
            self.missing = f"the charts could not be drawn in {RENDER_TIMEOUT:.0f} s"
            return [None] * len(specs)
        try:
            drawn = json.loads(out) if child.returncode == 0 else None
        except ValueError:
            drawn = None
        if not isinstance(drawn, list) or len(drawn) != len(specs):
            said = err.decode("utf-8", "replace").strip()[-ERROR_CHARS:]
            self.missing = f"the charts could not be drawn (renderer exit code {child.returncode}: {said})"
            return [None] * len(specs)
        result: list[str | None] = []
        for item in drawn:
            if isinstance(item, str):
                result.append(item)
            else:
                self.missing = f"a chart could not be drawn ({str(item.get('error'))[:ERROR_CHARS]})"
                result.append(None)
        return result
