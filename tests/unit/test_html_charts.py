"""report.html's charts, drawn as SVG by lifeguard itself: well-formed XML whatever the series are named,
axes that number what was run, a log scale where run times span orders of magnitude."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lifeguard.report.html_charts import ALONG_BARS, SeriesPoint, along_svg, chart_label, duration_svg, rate_svg

HOSTILE = "<b>&amp; \x1b[2J \x00 \ufffe \udcff"
SVG = "{http://www.w3.org/2000/svg}"


def parsed(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed, or this raises
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def point(name: str, durations: list[float], rate: float = 0.2) -> SeriesPoint:
    return SeriesPoint(chart_label(1, name), "unexpected", rate, 0.05, 0.5, "1/5 runs failed", durations)


def test_hostile_names_make_well_formed_charts() -> None:
    points = [point(HOSTILE, [0.1, 0.2, 0.3]), point("quiet", [0.2])]
    for svg in (rate_svg(points), duration_svg(points), along_svg(HOSTILE, [(0, "passed"), (1, "crashed")], 1)):
        root = parsed(svg)
        shown = " ".join(texts(root))
        assert "<b>" in shown and "\x1b" not in shown and "\x00" not in shown  # markup as text, controls shown


def test_run_times_spanning_orders_of_magnitude_get_a_log_axis() -> None:
    root = parsed(duration_svg([point("fast", [0.05, 0.06]), point("hang", [30.0])]))
    labels = texts(root)
    assert "run time, seconds (log scale)" in labels and "0.01" in labels and "100" in labels
    root = parsed(duration_svg([point("a", [0.5, 1.0]), point("b", [1.5])]))
    assert "run time, seconds" in texts(root) and "0" in texts(root)


def test_the_outcome_strip_numbers_the_runs_it_drew() -> None:
    five = parsed(along_svg("five", [(n, "passed") for n in range(5)], None))
    assert [t for t in texts(five) if t.isdigit()] == ["1", "2", "3", "4", "5"]
    many = parsed(along_svg("many", [(n, "crashed" if n % 7 == 0 else "passed") for n in range(500)], 0))
    numbers = [int(t) for t in texts(many) if t.isdigit()]
    assert numbers[0] == 1 and numbers[-1] == 500 and numbers == sorted(numbers)
    bars = {r.get("x") for r in many.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None}
    assert len(bars) <= ALONG_BARS
    assert "run number (9 runs a bar)" in texts(many)
    assert any("first failure: run 1" in (t.text or "") for t in many.iter(f"{SVG}title"))
