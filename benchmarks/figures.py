"""The measured figures page: docs/figures.md is rendered from benchmarks/figures.json, never edited by hand.

Each benchmark run with ``--figures`` records what it measured (the lines of its section, the command, the
date, the machine) in figures.json and renders the page again; tests/unit/test_figures.py checks that the
page is the rendering of the records and that every record names a benchmark that writes it. The sections'
titles, their order and the prose around the figures are here (SECTIONS): prose that needs a number takes it
from a record.

    python benchmarks/figures.py            # render docs/figures.md from benchmarks/figures.json
    python benchmarks/figures.py --check    # exit 1 when the page is not that rendering
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "benchmarks" / "figures.json"
PAGE = ROOT / "docs" / "figures.md"


@dataclass(frozen=True)
class Section:
    title: str  # the page's heading: other pages link to its anchor
    script: str  # the benchmark under benchmarks/ that records it, with its arguments
    about: str  # a line of prose before the figures: what they are about, never a number
    see: str  # the page that explains what is measured


SECTIONS: dict[str, Section] = {
    "quick-start": Section(
        "The quick start", "quickstart.py",
        "The README's first command: every bundled scenario, both variants, with the terminal's last line.",
        "[the quick start](index.md#quick-start)"),
    "run-overhead": Section(
        "Per run", "overhead.py",
        "A trivial scenario through `lifeguard run` against bare spawns of the same interpreter, alternated; both "
        "in a private venv where lifeguard is installed as a user installs it (a lean interpreter: its bare start "
        "is about 12 ms here, so every millisecond of a run's own cost weighs four times what it did against this "
        "machine's own interpreter, whose site hooks take 30 ms).",
        "[What a run is](runs.md)"),
    "throughput": Section(
        "Fork-server throughput", "throughput.py",
        "Runs a second of a trivial scenario in fresh interpreters and from a warm fork-server.",
        "[What a run is](runs.md)"),
    "head-start": Section(
        "The head start of a wrapped command", "overhead.py",
        "What `lifeguard run -q -- python3 script.py` adds to a program of about a second, lifeguard installed "
        "as a user installs it.",
        "[A CI step under guard](running.md#a-ci-step-under-guard)"),
    "pytest": Section(
        "pytest --lifeguard on real suites", "pytest_overhead.py",
        "The own test suites of four compiled packages, built from their sdists, under plain pytest and "
        "`--lifeguard` (tests in groups, the default), alone and with `-n 2`, in turn, and once with a child per "
        "test; then with a test added that leaves a C destructor crashing at exit: its session time is the "
        "bisection's price.",
        "[In your pytest suite](pytest.md)"),
    "fidelity": Section(
        "Fidelity", "fidelity.py",
        "Real races of three bug classes, each run plain and under `lifeguard run`, interleaved: how often each "
        "fails, and the ratio (a ratio under 1 means lifeguard hides part of the race). For scale, the same "
        "programs plain beside a neighbour that wakes every 0.2 ms or computes without pause: what the "
        "machine's other work alone does to a rate.",
        "[What a run is](runs.md) and the statistics in [Stress](stress.md)"),
    "capture": Section(
        "Native capture", "capture.py",
        "lifeguard's capture of a parked process against plain gdb and pystack.",
        "[Evidence and findings](evidence-and-findings.md)"),
    "report-page": Section(
        "The report page", "html_page.py --synthetic 10000",
        "report.html in headless Chromium: its size and load time.",
        "[Reports](reports.md)"),
    "suite": Section(
        "The test suite", "suite.py",
        "The README's test command, `python3 -m pytest -q`, on a clean clone's tree, quiet and with both cores "
        "busy.",
        "[Development](development.md)"),
}

HEADER = """\
# Figures

<!-- Rendered by `python3 benchmarks/figures.py` from benchmarks/figures.json: edit neither by hand. -->

The measured figures the other pages refer to, in one place. Each section is what the benchmark named under
it printed when last run with `--figures`: the date, the machine and the command are under its figures, and
running that command again replaces them ("here" is the machine named). What each script measures and its
target: [Benchmarks](benchmarks.md).
"""


def load() -> dict[str, dict[str, Any]]:
    return json.loads(RECORDS.read_text()) if RECORDS.exists() else {}


def render(records: dict[str, dict[str, Any]]) -> str:
    parts = [HEADER]
    for key, section in SECTIONS.items():
        parts.append(f"\n## {section.title}\n\n{section.about}\n")
        record = records.get(key)
        if record is None:
            parts.append(f"\nNot measured yet: `python3 benchmarks/{section.script} --figures`.\n")
        else:
            parts.append("\n" + "".join(f"- {line}\n" for line in record["lines"]))
            parts.append(f"\nMeasured {record['date']} on {record['machine']}: `{record['command']}`.\n")
        parts.append(f"See {section.see}.\n")
    return "".join(parts)


def machine() -> str:
    cores = os.cpu_count() or 1
    return f"{cores} core{'s' if cores != 1 else ''}, {platform.system()}, Python {platform.python_version()}"


def _shown(arg: str) -> str:
    """An argument as the page shows it: an interpreter given by its path as the name it resolves to
    (python3.13), not as this machine's folder of it."""
    if arg.startswith("/") and Path(arg).name.startswith("python") and Path(arg).is_file():
        return Path(arg).resolve().name
    return arg


def command(argv: list[str]) -> str:
    """The command line that re-measures: the script by its path from the checkout, --figures included."""
    script = Path(argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return shlex.join(["python3", str(shown), *map(_shown, argv[1:])])


def record(key: str, lines: list[str], argv: list[str] | None = None) -> None:
    """Record a benchmark's section (``lines``: markdown, one figure each) and render the page again."""
    if key not in SECTIONS:
        raise KeyError(f"no figures section {key!r} (there are: {', '.join(SECTIONS)})")
    records = load()
    records[key] = {"lines": lines, "date": datetime.date.today().isoformat(), "machine": machine(),
                    "command": command(argv if argv is not None else sys.argv)}
    RECORDS.write_text(json.dumps({k: records[k] for k in SECTIONS if k in records}, indent=2) + "\n")
    PAGE.write_text(render(records))
    print(f"figures: recorded {key!r} in {RECORDS.relative_to(ROOT)}, rendered {PAGE.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/figures.md is not the rendering")
    args = parser.parse_args()
    page = render(load())
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE.relative_to(ROOT)} is not the rendering of {RECORDS.relative_to(ROOT)}: "
                  "run python3 benchmarks/figures.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
