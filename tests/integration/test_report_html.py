"""report.html of a real session (tests/integration/report_cases.py): the verdicts in order, every run of
results.jsonl in its table, the evidence of each failing series with the code that ran, its stacks and links
to its files that still work once the folder is moved."""

from __future__ import annotations

import html
import json
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.helpers import Pace, load_report
from tests.integration.report_cases import CODE, RUNS, SERIES, make_report, runs_of
from tests.synthetic_report import write_synthetic_report


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, pace: Pace) -> Path:
    return make_report(tmp_path_factory.mktemp("html"), pace)


def page_of(report: Path) -> str:
    return (report / "report.html").read_text(encoding="utf-8")


def table_of(page: str) -> dict[str, list]:  # type: ignore[type-arg]
    match = re.search(r'<script type="application/json" id="lg-runs">(.*?)</script>', page, re.S)
    assert match is not None
    return dict(json.loads(match.group(1)))


def section(page: str, label: str) -> str:
    """The evidence section of one series."""
    start = page.index(f"<summary>{html.escape(label)}: expected")
    end = page.find('<details class="series-evidence', start)
    return page[start: end if end > 0 else len(page)]


def test_verdicts_first_unexpected_on_top(report: Path) -> None:
    page = page_of(report)
    assert "<h1 id=\"state\">lifeguard report: 2 unexpected of 5 series</h1>" in page
    order = [html.unescape(name) for name in re.findall(r'<tr class="series \w+" data-name="([^"]*)">', page)]
    assert len(order) == SERIES
    assert set(order[:2]) == {"reads_address_zero[default]", "code[default]"}  # the unexpected ones
    assert order[-1] == "passes[default]"  # no failed run: last
    assert "under lifeguard, 4/12 runs failed: rate 33% (95% CI 14%-61%)" in page and "run 2, after" in page


def test_the_table_holds_every_run_of_results_jsonl(report: Path) -> None:
    data = table_of(page_of(report))
    runs = runs_of(report)
    assert len(runs) == RUNS == len(data["rows"])
    words, names = data["words"], dict(data["series"])
    listed = sorted((names[r[0]], r[1], words[r[2]], r[5]) for r in data["rows"])
    assert listed == sorted((f"{r['scenario']}[{r['variant']}]", r["index"], r["outcome"], r["seed"]) for r in runs)
    for row in data["rows"]:
        if words[row[2]] != "passed":  # a failed run's folder, relative to the page, is there
            assert row[8] and (report / unquote(row[8])).is_dir(), row


def test_each_failing_series_shows_its_evidence(report: Path) -> None:
    page = page_of(report)
    sections = re.findall(r'<details class="series-evidence (\w+)" id="(s\d)"( open)?>', page)
    assert len(sections) == 4 and all(open_ for verdict, _, open_ in sections if verdict == "unexpected")
    assert f'<pre class="code">{html.escape(CODE)}</pre>' in page  # the -c program, as typed
    assert "def reads_address_zero():\n    &quot;&quot;&quot;Dereferences NULL" in page  # a scenario's body
    assert page.count('<button class="copy"') >= 4  # a replay command for each shown run
    # The hang: its finding, and the main thread (the one that joins) open, its innermost Python frame marked.
    hang = section(page, "joins_a_thread_that_waits_forever[default]")
    assert '<span class="kind">[hang]</span> hung with every thread blocked' in hang
    assert re.search(r'<details class="thread culprit" open><summary>Thread \d+ [^<]*blocked', hang)
    # The innermost Python frame of a join: 3.13 moved its wait into C (the thread handle's join).
    innermost = "_wait_for_tstate_lock" if sys.version_info < (3, 13) else "join"
    assert re.search(rf'<li class="frame py culprit"><span class="kind">py</span>{innermost}  \(', hang)
    assert '<details class="thread"><summary>Thread' in hang  # the waiter: closed, one line
    # The crash: pystack read its core; the thread that got the signal is open, the culprit frame (the
    # innermost outside libc and the interpreter) marked, the program's own frame shown, the bootstrap's hidden.
    crash = section(page, "reads_address_zero[default]")
    assert "got SIGSEGV" in crash and "[pystack-core]" in crash
    frame = '<li class="frame {}"><span class="kind">{}</span>'
    assert crash.count(frame.format("native culprit", "C")) == 1
    assert re.search(re.escape(frame.format("py", "py")) + r"reads_address_zero  \(.*cases.py:12\)", crash)
    assert re.search(re.escape(frame.format("py harness", "py")) + r"main  \(.*/lifeguard/child/bootstrap", crash)
    # The two summary charts, and one along each failing series that ran more than once (one run: no chart).
    summaries = load_report(report)["summaries"]
    repeated_failing = [x for x in summaries if x["runs"] > 1 and x["counts"].get("passed", 0) < x["runs"]]
    assert len(repeated_failing) == 1 and page.count("<svg") == 2 + 1


def test_links_work_once_the_folder_is_moved(report: Path, tmp_path: Path) -> None:
    moved = tmp_path / "uploaded-artifact"
    shutil.copytree(report, moved)
    page = page_of(moved)
    links = [html.unescape(h) for h in re.findall(r'<a href="([^"#][^"]*)"', page)]
    assert len(links) >= 10 and not any(link.startswith(("/", "file:")) for link in links), links
    for link in links:
        assert (moved / unquote(link)).exists(), link
    assert any(link.endswith("/backtraces.txt") for link in links)  # the hang's, and the crash's stacks
    assert any(link.endswith("/stderr.txt") for link in links)


def test_a_10000_run_page_stays_small_and_lists_every_run(tmp_path: Path) -> None:
    """Synthetic runs (no process ran), written through the real sink: the page's size at 10,000 runs."""
    session = write_synthetic_report(tmp_path / "r", 10_000)
    page_file = tmp_path / "r" / "report.html"
    size = page_file.stat().st_size
    assert size < 5 * 2**20, f"{size:,} bytes"
    page = page_file.read_text()
    data = table_of(page)
    assert len(data["rows"]) == 10_000 == session.finished
    charted = sum(1 for s in session.summaries if s.runs > 1 and s.runs - s.counts.get("passed", 0))
    assert page.count("<svg") == 2 + charted
    assert 'id="rate-chart"' in page and 'id="duration-chart"' in page
