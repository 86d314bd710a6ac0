"""A survey's reports: survey.json, the terminal table (one row per package x probe mode) and survey.html.

survey.json (schema_version 1, documented in docs/probe-and-survey.md) holds one entry per package x module x
probe mode; the table folds a package's modules into one row per mode, showing the class that needs the most attention.
Every text that came from a child passes report.escape for its target, as in every other report.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifeguard import __version__
from lifeguard.model.result import Session
from lifeguard.model.survey import (
    CANDIDATE,
    CLEAN,
    DOCUMENTED,
    NEEDS_A_LOOK,
    NOT_EXERCISED,
    PROBE_ERROR,
    TRIAGE_CLASSES,
    Package,
    SurveyEntry,
)
from lifeguard.report.escape import for_json, for_terminal

SCHEMA_VERSION = 1
# Which class a package x mode row shows when its modules differ: the one that needs the most attention.
ATTENTION = (CANDIDATE, PROBE_ERROR, NOT_EXERCISED, DOCUMENTED, CLEAN)
DETAIL_WIDTH = 100


@dataclass(frozen=True)
class Survey:
    """Everything a survey's reports show."""

    session: Session
    packages: tuple[Package, ...]
    entries: tuple[SurveyEntry, ...]
    probes: tuple[str, ...]
    problems: tuple[str, ...] = ()  # hooks that could not be used, and the like

    def counts(self) -> dict[str, int]:
        found = Counter(entry.triage for entry in self.entries)
        return {name: found.get(name, 0) for name in TRIAGE_CLASSES}


def survey_dict(survey: Survey) -> dict[str, Any]:
    session = survey.session
    return {
        "schema_version": SCHEMA_VERSION, "lifeguard_version": __version__,
        "python": {"executable": session.interpreter.executable, "version": session.interpreter.version_text},
        "started": session.started, "duration": session.duration, "interrupted": session.interrupted,
        "probes": list(survey.probes), "counts": survey.counts(), "problems": list(survey.problems),
        "packages": [{"package": p.name, "version": p.version, "extensions": list(p.extensions),
                      "probed": list(p.targets), "skipped": [s.to_dict() for s in p.skipped],
                      "hook": p.hook.to_dict() if p.hook else None} for p in survey.packages],
        "entries": [entry.to_dict() for entry in survey.entries],
    }


def write_survey_json(survey: Survey, folder: Path) -> Path:
    path = folder / "survey.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(for_json(survey_dict(survey)), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class Row:
    """One package x probe mode of the table."""

    package: str
    version: str
    probe: str
    triage: str
    modules: int
    detail: str


def rows(survey: Survey) -> list[Row]:
    grouped: dict[tuple[str, str], list[SurveyEntry]] = {}
    for entry in survey.entries:
        grouped.setdefault((entry.package, entry.probe), []).append(entry)
    found = []
    for (package, probe), entries in grouped.items():
        worst = min(entries, key=lambda e: ATTENTION.index(e.triage))
        detail = {CANDIDATE: worst.reproduction, DOCUMENTED: worst.limitation.link if worst.limitation else "",
                  PROBE_ERROR: worst.reason, NOT_EXERCISED: worst.reason,
                  CLEAN: worst.exercised[0].text() if worst.exercised else ""}.get(worst.triage, "")
        if worst.triage in (CANDIDATE, DOCUMENTED) and worst.reason:
            detail = f"{worst.module}: {worst.reason} -> {detail}"
        found.append(Row(package, worst.version, probe, worst.triage, len(entries), detail))
    return found


def survey_table(survey: Survey) -> str:
    """The terminal table: package, version, probe, class, modules probed, and what to look at."""
    table = [("package", "version", "probe", "class", "modules", "detail")]
    for row in rows(survey):
        detail = for_terminal(" ".join(row.detail.split()))
        if len(detail) > DETAIL_WIDTH:
            detail = detail[:DETAIL_WIDTH - 3] + "..."
        table.append((row.package, row.version, row.probe, row.triage, str(row.modules), detail))
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:5], widths, strict=True)) + "  " + line[5]
             for line in table]
    counts = survey.counts()
    lines.append(", ".join(f"{n} {name}" for name, n in counts.items()) + f" (package x module x probe) in "
                 f"{survey.session.duration:.1f} s")
    return "\n".join(line.rstrip() for line in lines)


def render_survey_page(survey: Survey, base: Path) -> str:
    """survey.html: the table, every entry's evidence links, the skipped modules; links relative to ``base``."""
    from lifeguard.report.html import page_environment
    from lifeguard.report.html_evidence import href

    def link(path: str) -> str:
        return href(path, base) if path else ""

    counts = survey.counts()
    good = not any(counts[name] for name in NEEDS_A_LOOK)
    return str(page_environment().get_template("survey.html.j2").render(
        survey=survey, rows=rows(survey), counts=counts, good=good, link=link, version=__version__,
        started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(survey.session.started)),
        interp=survey.session.interpreter))


def write_survey_page(survey: Survey, folder: Path) -> Path:
    path = folder / "survey.html"
    path.write_text(render_survey_page(survey, folder), encoding="utf-8")
    return path


def needs_a_look(entries: Sequence[SurveyEntry]) -> bool:
    return any(entry.triage in NEEDS_A_LOOK for entry in entries)
