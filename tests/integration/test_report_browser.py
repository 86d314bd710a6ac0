"""report.html in a real browser: Debian's headless chromium, driven by Playwright (tests/browser.py), on the
page of a real session (tests/integration/report_cases.py) and on a synthetic 10,000-run page.

Outside CI, a machine without chromium or playwright skips these with the reason; in CI (CI=true) that is a
failure: .ci/run installs chromium and the test extra installs playwright. Screenshots stay in each test's
temporary folder (the CI artifact), their size asserted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import VIEWPORT, OpenPage, browser_missing, open_report
from tests.helpers import Pace
from tests.integration.report_cases import RUNS, make_report
from tests.synthetic_report import write_synthetic_report

SCREENSHOT_BYTES = 20_000  # a blank or broken page compresses far below this


def _require_browser() -> None:
    reason = browser_missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the browser tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, pace: Pace) -> Path:
    _require_browser()
    return make_report(tmp_path_factory.mktemp("browser"), pace)


@pytest.fixture
def opened(report: Path, tmp_path: Path, pace: Pace) -> Iterator[OpenPage]:
    with open_report(report / "report.html", tmp_path / "profile", pace.deadline(60)) as page:
        yield page


def visible(page: OpenPage, selector: str) -> int:
    return int(page.page.locator(selector).evaluate_all("nodes => nodes.filter(n => n.offsetParent !== null).length"))


def test_the_page_loads_offline_with_charts_and_the_culprit_in_view(opened: OpenPage, tmp_path: Path) -> None:
    assert opened.console_errors == [] and opened.network == []
    page = opened.page
    assert page.title().startswith("lifeguard report: 2 unexpected of 5 series")
    for chart in ("#rate-chart svg", "#duration-chart svg"):
        box = page.locator(chart).bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 50, chart
    assert visible(opened, ".chart.along svg") >= 1  # the repeated series' outcome chart
    # Without scrolling, the verdict table shows each unexpected series' finding and culprit frame.
    top = tmp_path / "report-top.png"
    page.screenshot(path=str(top))
    assert page.evaluate("window.scrollY") == 0
    for row in ("#series-table tr.unexpected .finding-line", "#series-table tr.unexpected .culprit-line"):
        box = page.locator(row).first.bounding_box()
        assert box is not None and box["height"] > 5, row
        assert box["y"] + box["height"] <= VIEWPORT["height"] and box["x"] + box["width"] <= VIEWPORT["width"], box
    assert "SIGSEGV" in page.locator("#series-table tr.unexpected .finding-line").first.inner_text()
    assert top.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and top.stat().st_size > SCREENSHOT_BYTES
    culprit = page.locator("#s1 .frame.culprit").first  # the unexpected crash: open, its culprit frame shown
    culprit.scroll_into_view_if_needed()
    assert culprit.is_visible()
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > SCREENSHOT_BYTES


def test_lifeguards_frames_are_behind_the_toggle(opened: OpenPage) -> None:
    assert visible(opened, "#s1 .frame.harness") == 0 and visible(opened, "#s1 .frame.py") >= 1
    opened.page.locator("label[for=show-harness]").first.click()
    assert visible(opened, "#s1 .frame.harness") >= 3  # the bootstrap's frames, now shown


def test_filters_change_the_runs_table(opened: OpenPage) -> None:
    page = opened.page
    rows = page.locator("#runs-body tr")
    assert rows.count() == RUNS and page.locator("#page-info").inner_text().startswith(f"runs 1-{RUNS} of {RUNS}")
    page.locator("input.outcome-filter[data-outcome=passed]").uncheck()
    passed = 3 + 8  # passes[default]'s 3, the flaky series' 8
    assert rows.count() == RUNS - passed
    assert all(text != "passed" for text in page.locator("#runs-body .badge").all_inner_texts())
    page.locator("#unexpected-only").check()
    assert rows.count() == 2  # the crash and the -c program: the runs their expectation cannot accept
    page.locator("#unexpected-only").uncheck()
    page.locator("input.outcome-filter[data-outcome=passed]").check()
    [flaky] = [o for o in page.locator("#series-filter-runs option").all_inner_texts() if "aborts_every" in o]
    page.locator("#series-filter-runs").select_option(label=flaky)
    assert rows.count() == 12 and "(filtered from" in page.locator("#page-info").inner_text()
    page.locator("#runs-body a", has_text="on this page").first.click()
    assert page.evaluate("location.hash") == f"#r{flaky.split('.')[0]}-1"  # its first failure: run 2


def test_the_summary_filter_and_the_copy_button(opened: OpenPage) -> None:
    page = opened.page
    page.locator("#series-filter").fill("abort")
    assert visible(opened, "#series-table tbody tr") == 1
    page.locator("#series-filter").fill("")
    assert visible(opened, "#series-table tbody tr") == 5
    button = page.locator("#s1 button.copy").first
    button.click()
    page.wait_for_function("b => b.textContent === 'copied'", arg=button.element_handle())


def test_a_10000_run_page_loads_and_pages(tmp_path: Path, pace: Pace) -> None:
    """Synthetic runs (no process ran; tests/synthetic_report.py) at the size the page must bear."""
    _require_browser()
    write_synthetic_report(tmp_path / "r", 10_000)
    page_file = tmp_path / "r" / "report.html"
    assert page_file.stat().st_size < 5 * 2**20
    with open_report(page_file, tmp_path / "profile", pace.deadline(60)) as opened:
        assert opened.console_errors == [] and opened.network == []
        page = opened.page
        assert page.locator("#runs-body tr").count() == 100
        assert page.locator("#page-info").inner_text() == "runs 1-100 of 10000, page 1 of 100"
        page.locator("#next-page").click()
        assert page.locator("#page-info").inner_text().startswith("runs 101-200 of 10000")
        page.locator("input.outcome-filter[data-outcome=passed]").uncheck()
        crashed = int(page.locator("input.outcome-filter[data-outcome=crashed]").evaluate(
            "b => b.parentNode.textContent.match(/\\((\\d+)\\)/)[1]"))
        assert page.locator("#page-info").inner_text().startswith(f"runs 1-100 of {crashed} (filtered from 10000)")
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > SCREENSHOT_BYTES
        print(f"10,000 runs: {page_file.stat().st_size:,} bytes, Chromium load {opened.load_seconds:.3f} s")
