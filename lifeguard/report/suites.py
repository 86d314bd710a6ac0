"""suites.html: the page of a ``lifeguard survey --tests``, from what suites.json holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lifeguard import __version__


def render_suites_page(data: dict[str, Any], base: Path) -> str:
    """The packages' table and each candidate with its tests, evidence and reproduction (links relative to
    ``base``)."""
    from lifeguard.report.html import page_environment
    from lifeguard.report.html_evidence import href

    packages = data["packages"]
    verdicts = [c["verdict"] for p in packages for c in p["candidates"]]
    unsurveyed = sum(bool(p["problem"]) for p in packages)
    return str(page_environment().get_template("suites.html.j2").render(
        packages=packages, probes=data["probes"], budget=data["budget"], timeout=data["timeout"],
        python=data["python"], version=__version__, candidates=verdicts.count("candidate"),
        documented=verdicts.count("documented"), unsurveyed=unsurveyed,
        good=not unsurveyed and "candidate" not in verdicts, link=lambda path: href(path, base) if path else ""))
