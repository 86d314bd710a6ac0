"""A real browser for report.html: Debian's chromium driven by Playwright's Python API, never a downloaded
browser. Used by tests/integration/test_report_browser.py and benchmarks/html_page.py.

Each page is opened in a persistent context on a new, empty profile folder, so nothing of an earlier run
(cache, storage) can help a page load. Requests other than file: and data: URLs are refused and recorded:
a page that reaches for the network fails. After the browser closes, any process still naming that profile
folder in its command line is one it left behind: it is killed and reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import processes_naming

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 900}  # a laptop's browser window


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
    return None


@dataclass
class OpenPage:
    page: Any  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)  # requests the page made that are not file: or data:
    load_seconds: float = 0.0  # navigation start to the end of the load event, as the browser measured it
    wall_seconds: float = 0.0  # goto() as this process saw it


@contextlib.contextmanager
def open_report(path: Path, profile: Path, timeout: float) -> Iterator[OpenPage]:
    """``path`` loaded in headless chromium, every wait bounded by ``timeout`` seconds."""
    from playwright.sync_api import sync_playwright

    profile.mkdir(parents=True, exist_ok=False)  # new and empty
    limit_ms = timeout * 1000
    try:
        with sync_playwright() as driver:
            context = driver.chromium.launch_persistent_context(
                str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=limit_ms,
                viewport=VIEWPORT)
            try:
                context.set_default_timeout(limit_ms)
                page = context.pages[0] if context.pages else context.new_page()
                opened = OpenPage(page)

                def refuse(route: Any) -> None:
                    url = route.request.url
                    if url.startswith(("file:", "data:")):
                        route.continue_()
                    else:
                        opened.network.append(url)
                        route.abort()

                context.route("**/*", refuse)
                page.on("console", lambda m: opened.console_errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: opened.console_errors.append(f"page error: {e}"))
                started = time.monotonic()
                page.goto(path.resolve().as_uri(), wait_until="load")
                opened.wall_seconds = time.monotonic() - started
                opened.load_seconds = float(page.evaluate(
                    "() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return (n.loadEventEnd - n.startTime) / 1000; }"))
                yield opened
            finally:
                context.close()
    finally:
        leftover = processes_naming(str(profile))  # the browser's, by the folder made for it
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not leftover, f"the browser left processes behind: {leftover}"
