"""report.html's charts, drawn as inline SVG here: no renderer, no script, no network and nothing to install
beyond lifeguard, so every page has them.

Three kinds: each series' failure rate with its 95% interval, each series' run times as a box plot, and the
outcomes along one series by run number. Every text in a chart passes report.escape.for_xml (control
characters) and is then escaped for XML.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from lifeguard.report.escape import for_xml

# Outcome colours, the same in every chart and in the page's badges (report.css).
OUTCOME_COLOURS = {"passed": "#2e7d32", "failed": "#ef6c00", "crashed": "#c62828", "hung": "#6a1b9a",
                   "corrupted": "#8d6e63", "not exercised": "#757575", "error": "#212121"}
VERDICT_COLOURS = {"unexpected": "#c62828", "expected": "#2e7d32"}
LABEL_CHARS = 60  # a pytest node id can be long: the axis shows its start, the table the whole name
DURATIONS_PER_SERIES = 4000  # a box plot drawn from at most this many runs of a series (evenly spaced)
ROW_PIXELS = 18
PLOT_WIDTH = 360  # the plotting area of the summary charts, beside their labels
ALONG_WIDTH = 520
ALONG_BARS = 60  # one bar a run up to this many runs, else bins of several runs
CHAR_PIXELS = 6.6  # an 11 px sans-serif character, wide enough for the labels' column
TITLE_HEIGHT = 24
AXIS_HEIGHT = 34
_TEXT = 'font-family="sans-serif" font-size="11" fill="#222"'


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


def _x(text: str) -> str:
    return escape(for_xml(text), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" height="{_num(height)}" '
            f'viewBox="0 0 {_num(width)} {_num(height)}" role="img" aria-label="{_x(title)}">'
            f'<text x="0" y="15" font-family="sans-serif" font-size="13" font-weight="bold" fill="#222">'
            f'{_x(title)}</text>' + "".join(body) + "</svg>")


def _legend(x: float, items: Sequence[tuple[str, str]]) -> list[str]:
    """Coloured squares with their names, along the title's line from ``x``."""
    body = []
    for name, colour in items:
        body.append(f'<rect x="{_num(x)}" y="6" width="10" height="10" fill="{colour}"/>'
                    f'<text x="{_num(x + 14)}" y="15" {_TEXT}>{_x(name)}</text>')
        x += 14 + len(name) * CHAR_PIXELS + 12
    return body


def _labels_width(points: Sequence[SeriesPoint]) -> float:
    return 12 + CHAR_PIXELS * max((len(p.label) for p in points), default=1)


def _rows(points: Sequence[SeriesPoint], left: float) -> list[str]:
    """Each series' label, right-aligned before the plot, one row each."""
    return [f'<text x="{_num(left - 8)}" y="{_num(TITLE_HEIGHT + i * ROW_PIXELS + 13)}" text-anchor="end" '
            f'{_TEXT}>{_x(p.label)}</text>' for i, p in enumerate(points)]


def _x_axis(left: float, top: float, ticks: Sequence[tuple[float, str]], title: str) -> list[str]:
    """A horizontal axis at ``top``: ``ticks`` are (x offset in the plot, label)."""
    body = [f'<line x1="{_num(left)}" y1="{_num(top)}" x2="{_num(left + PLOT_WIDTH)}" y2="{_num(top)}" '
            'stroke="#888"/>']
    for offset, label in ticks:
        x = left + offset
        body.append(f'<line x1="{_num(x)}" y1="{_num(top)}" x2="{_num(x)}" y2="{_num(top + 4)}" stroke="#888"/>'
                    f'<text x="{_num(x)}" y="{_num(top + 15)}" text-anchor="middle" {_TEXT}>{_x(label)}</text>')
    body.append(f'<text x="{_num(left + PLOT_WIDTH / 2)}" y="{_num(top + 30)}" text-anchor="middle" '
                f'{_TEXT}>{_x(title)}</text>')
    return body


def rate_svg(points: Sequence[SeriesPoint]) -> str:
    """Each series' failure rate (a dot) and its 95% Wilson interval (a bar), coloured by verdict."""
    left = _labels_width(points)
    bottom = TITLE_HEIGHT + ROW_PIXELS * len(points)
    body = _legend(left + 180, list(VERDICT_COLOURS.items())) + _rows(points, left)
    for i, p in enumerate(points):
        y = TITLE_HEIGHT + i * ROW_PIXELS + ROW_PIXELS / 2
        colour = VERDICT_COLOURS.get(p.verdict, "#555")
        low, high, rate = (left + PLOT_WIDTH * min(max(v, 0.0), 1.0) for v in (p.low, p.high, p.rate))
        body.append(f'<g><title>{_x(p.label)}: {_x(p.bound)}</title>'
                    f'<line x1="{_num(low)}" y1="{_num(y)}" x2="{_num(high)}" y2="{_num(y)}" stroke="{colour}" '
                    f'stroke-width="3" stroke-opacity="0.6"/>'
                    f'<circle cx="{_num(rate)}" cy="{_num(y)}" r="4" fill="{colour}"/></g>')
    ticks = [(PLOT_WIDTH * q / 4, f"{25 * q}%") for q in range(5)]
    body += _x_axis(left, bottom + 2, ticks, "failure rate, 95% confidence interval")
    return _svg(left + PLOT_WIDTH + 20, bottom + 2 + AXIS_HEIGHT, "Failure rate of each series", body)


def _spread(durations: Sequence[float], limit: int) -> list[float]:
    if len(durations) <= limit:
        return list(durations)
    step = len(durations) / limit
    return [durations[int(n * step)] for n in range(limit)]


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _nice_step(span: float) -> float:
    """A round step (1, 2 or 5 times a power of ten) that cuts ``span`` into about five."""
    raw = span / 5 if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def duration_svg(points: Sequence[SeriesPoint]) -> str:
    """Each series' run times as a box plot (whiskers at the minimum and maximum); a log axis when the
    runs span more than two orders of magnitude (a 0.05 s pass beside a 30 s hang)."""
    rows = [sorted(max(d, 1e-4) for d in _spread(p.durations, DURATIONS_PER_SERIES)) for p in points]
    seconds = [d for row in rows for d in row] or [1.0]
    log = max(seconds) / min(seconds) > 100
    if log:
        first, last = math.floor(math.log10(min(seconds))), math.ceil(math.log10(max(seconds)))
        last = max(last, first + 1)

        def place(value: float) -> float:
            return float(PLOT_WIDTH * (math.log10(value) - first) / (last - first))

        ticks = [(place(10.0 ** e), f"{10.0 ** e:g}") for e in range(first, last + 1)]
    else:
        step = _nice_step(max(seconds))
        top = step * math.ceil(max(seconds) / step)

        def place(value: float) -> float:
            return PLOT_WIDTH * value / top

        ticks = [(place(k * step), f"{k * step:g}") for k in range(round(top / step) + 1)]
    left = _labels_width(points)
    bottom = TITLE_HEIGHT + ROW_PIXELS * len(points)
    body = _rows(points, left)
    for i, row in enumerate(rows):
        if not row:
            continue
        y = TITLE_HEIGHT + i * ROW_PIXELS + ROW_PIXELS / 2
        low, q1, median, q3, high = (left + place(_quantile(row, q)) for q in (0.0, 0.25, 0.5, 0.75, 1.0))
        body.append(f'<g stroke="#546e7a"><title>{_x(points[i].label)}: median {_quantile(row, 0.5):.3f} s, '
                    f'{len(row)} runs</title>'
                    f'<line x1="{_num(low)}" y1="{_num(y)}" x2="{_num(high)}" y2="{_num(y)}"/>'
                    f'<rect x="{_num(q1)}" y="{_num(y - 6)}" width="{_num(max(q3 - q1, 1))}" height="12" '
                    f'fill="#b0bec5"/>'
                    f'<line x1="{_num(median)}" y1="{_num(y - 6)}" x2="{_num(median)}" y2="{_num(y + 6)}" '
                    f'stroke="#fff" stroke-width="2"/></g>')
    body += _x_axis(left, bottom + 2, ticks, "run time, seconds" + (" (log scale)" if log else ""))
    return _svg(left + PLOT_WIDTH + 20, bottom + 2 + AXIS_HEIGHT, "Run time of each series", body)


def _run_ticks(runs: int) -> list[int]:
    """Run numbers to label on an axis of ``runs`` runs: 1, the last, and round ones between."""
    step = max(1, int(_nice_step(runs)))
    return sorted({1, runs, *range(step, runs, step)})


def along_svg(title: str, outcomes: Sequence[tuple[int, str]], first_failure: int | None) -> str:
    """The outcomes along one series by run number: one bar a run up to ALONG_BARS runs (its colour says it
    all), else bins of several runs stacked by outcome; a dashed line at its first failure. Which runs
    failed, and whether failures cluster."""
    runs = max((index + 1 for index, _ in outcomes), default=1)
    per_bar = 1 if runs <= ALONG_BARS else math.ceil(runs / ALONG_BARS)
    bars = math.ceil(runs / per_bar)
    width = ALONG_WIDTH / bars
    height = 40 if per_bar == 1 else 90
    left, top = 4.0, TITLE_HEIGHT + 4
    counts: list[dict[str, int]] = [{} for _ in range(bars)]
    for index, outcome in outcomes:
        bar = counts[index // per_bar]
        bar[outcome] = bar.get(outcome, 0) + 1
    present = [o for o in OUTCOME_COLOURS if any(o in bar for bar in counts)]
    body = _legend(min(left + len(title) * 7.5 + 24, ALONG_WIDTH - 150), [(o, OUTCOME_COLOURS[o]) for o in present])
    for n, bar in enumerate(counts):
        y = float(top + height)
        first_run = n * per_bar + 1
        for outcome in present:
            count = bar.get(outcome, 0)
            if not count:
                continue
            tall = height * count / per_bar
            y -= tall
            runs_text = f"run {first_run}" if per_bar == 1 else \
                f"runs {first_run}-{min(first_run + per_bar - 1, runs)}: {count}"
            body.append(f'<rect x="{_num(left + n * width)}" y="{_num(y)}" width="{_num(width)}" '
                        f'height="{_num(tall)}" fill="{OUTCOME_COLOURS.get(outcome, "#555")}">'
                        f'<title>{_x(runs_text)} {_x(outcome)}</title></rect>')
    axis = top + height
    body.append(f'<line x1="{_num(left)}" y1="{_num(axis)}" x2="{_num(left + ALONG_WIDTH)}" y2="{_num(axis)}" '
                'stroke="#888"/>')
    for run in _run_ticks(runs):
        x = left + ((run - 1) // per_bar + 0.5) * width
        body.append(f'<line x1="{_num(x)}" y1="{_num(axis)}" x2="{_num(x)}" y2="{_num(axis + 4)}" stroke="#888"/>'
                    f'<text x="{_num(x)}" y="{_num(axis + 15)}" text-anchor="middle" {_TEXT}>{run}</text>')
    body.append(f'<text x="{_num(left + ALONG_WIDTH / 2)}" y="{_num(axis + 30)}" text-anchor="middle" {_TEXT}>'
                f'run number ({"one run" if per_bar == 1 else f"{per_bar} runs"} a bar)</text>')
    if first_failure is not None and 0 <= first_failure < runs:
        x = left + (first_failure // per_bar + 0.5) * width
        body.append(f'<line x1="{_num(x)}" y1="{_num(top - 3)}" x2="{_num(x)}" y2="{_num(axis)}" stroke="#000" '
                    f'stroke-dasharray="4 3"><title>first failure: run {first_failure + 1}</title></line>')
    return _svg(left + ALONG_WIDTH + 8, axis + AXIS_HEIGHT, title, body)
