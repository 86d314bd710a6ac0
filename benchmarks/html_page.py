"""report.html in a real browser: its size, Chromium's load time, console errors, and a screenshot.

    python benchmarks/html_page.py REPORT_DIR [REPORT_DIR...]      # pages lifeguard wrote (--report DIR)
    python benchmarks/html_page.py --synthetic 10000 [--figures]   # a page of 10,000 synthetic runs

``--synthetic N`` writes a report folder through the real sink (ReportDirSink: results.jsonl, then the page
from it) for N made-up runs in 10 series, a few of them failing, none of them a real process: it measures the
page at that size, not lifeguard's runs. Each page opens in headless Debian chromium (a new empty profile,
network refused); the screenshot of what a reader sees first lands beside the page (report.png).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from figures import record  # noqa: E402

from tests.browser import browser_missing, open_report  # noqa: E402
from tests.synthetic_report import write_synthetic_report  # noqa: E402

PAGE_TIMEOUT = 120.0


def measure(folder: Path, full: bool = False) -> tuple[int, str]:
    """Prints the page's figures; returns its status (1: errors or requests) and the figures' line."""
    page_path = folder / "report.html"
    size = page_path.stat().st_size
    with tempfile.TemporaryDirectory(prefix="lifeguard-browser-") as profiles:
        with open_report(page_path, Path(profiles) / "profile", PAGE_TIMEOUT) as opened:
            shot = folder / "report.png"
            opened.page.screenshot(path=str(shot))
            if full:
                opened.page.screenshot(path=str(folder / "report-full.png"), full_page=True)
            errors, network = opened.console_errors, opened.network
            print(f"{page_path}: {size:,} bytes ({size / 2**20:.2f} MiB); Chromium load {opened.load_seconds:.3f} s "
                  f"(goto {opened.wall_seconds:.3f} s); console errors {len(errors)}; network requests "
                  f"{len(network)}; screenshot {shot} ({shot.stat().st_size:,} bytes)")
            for line in errors + network:
                print(f"  {line}")
            line = (f"{size / 2**20:.2f} MiB; Chromium loads it in {opened.load_seconds:.3f} s; "
                    f"{len(errors)} console errors, {len(network)} network requests")
            return (1 if errors or network else 0), line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="report folders holding report.html")
    parser.add_argument("--synthetic", type=int, metavar="RUNS", help="also measure a page of RUNS made-up runs")
    parser.add_argument("--full", action="store_true", help="also a screenshot of the whole page (report-full.png)")
    parser.add_argument("--keep", type=Path, help="where to write the synthetic report (default: a temp folder)")
    parser.add_argument("--figures", action="store_true", help="record the synthetic page's figures in docs/figures.md")
    args = parser.parse_args()
    missing = browser_missing()
    if missing:
        print(f"cannot measure: {missing}", file=sys.stderr)
        return 2
    status = 0
    for folder in args.folders:
        status |= measure(folder, args.full)[0]
    if args.synthetic:
        with tempfile.TemporaryDirectory(prefix="lifeguard-html-") as tmp:
            folder = args.keep or Path(tmp) / "report"
            write_synthetic_report(folder, args.synthetic)
            failed, line = measure(folder, args.full)
            status |= failed
        if args.figures:
            record("report-page", [f"a page of {args.synthetic:,} runs (made up, 10 series): {line}"])
    return status


if __name__ == "__main__":
    sys.exit(main())
