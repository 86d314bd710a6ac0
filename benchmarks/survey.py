"""`lifeguard survey` over widely used compiled packages (survey_packages.txt), in a venv of their own.

Makes (once) a venv under ~/.cache/lifeguard/survey-venv with the pinned list installed (wheels only, for
the interpreter this script runs under: CPython 3.11 for the pinned versions), then runs
`lifeguard survey --requirements survey_packages.txt --python VENV/bin/python --report DIR` from this
checkout and prints its wall time, the triage counts and the survey's exit code. lifeguard itself is not
installed into that venv: the survey reads it from outside, as it would a user's environment.

    python benchmarks/survey.py [--report DIR] [-j N] [--repeat N] [--probe MODE ...] [--only NAME ...]
    python benchmarks/survey.py --tests [--budget SECONDS] [--report DIR] [--only NAME ...]

``--only`` surveys a few names of the list (a smoke run); the venv still gets the whole list. ``--tests`` runs
each package's own test suite under the test-suite probes (`lifeguard survey --tests`), within ``--budget``
seconds a package; the venv then also has TEST_TOOLS, what most suites import besides the package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = Path(__file__).with_name("survey_packages.txt")
VENV_TIMEOUT = 120.0
INSTALL_TIMEOUT = 1800.0  # the whole list: a few hundred MB of wheels
SURVEY_TIMEOUT = 7200.0
TESTS_TIMEOUT = 4 * 3600.0  # --tests: a budget a package, and each package's source distribution fetched
# What most packages' suites need besides the package itself; a suite that needs more fails to collect, and the
# survey says so.
TEST_TOOLS = ("pytest", "hypothesis", "pytest-timeout")


def venv_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lifeguard" / "survey-venv"


def ensure_venv(root: Path) -> Path:
    """The venv's python, the list installed; reinstalled when the list changed since the last run."""
    python = root / "bin" / "python"
    stamp = root / "installed-list.txt"
    wanted = PACKAGES.read_text()
    wanted += "\n".join(TEST_TOOLS) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=VENV_TIMEOUT,
                       stdin=subprocess.DEVNULL)
    started = time.monotonic()
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--only-binary=:all:", "-r", str(PACKAGES),
                    *TEST_TOOLS], check=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
    print(f"installed {PACKAGES.name} into {root} in {time.monotonic() - started:.0f} s", flush=True)
    stamp.write_text(wanted)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=Path, help="the survey's report folder (default: a new temporary one)")
    parser.add_argument("-j", "--jobs", default="2", help="runs in parallel (default 2)")
    parser.add_argument("--probe", action="append", default=[], help="only this probe mode (repeatable)")
    parser.add_argument("--repeat", default="1", help="runs per package x module x mode (default 1)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="survey only these distributions of the list (repeatable)")
    parser.add_argument("--tests", action="store_true", help="survey through each package's own test suite")
    parser.add_argument("--budget", default="60", help="--tests: seconds a package (default 60)")
    args = parser.parse_args()
    python = ensure_venv(venv_root())
    report = args.report or Path(tempfile.mkdtemp(prefix="lifeguard-survey-bench-"))
    what = ["--requirements", str(PACKAGES)] if not args.only else args.only
    if args.tests:
        return survey_tests(python, report, what, args.budget, args.probe)
    command = [sys.executable, "-m", "lifeguard", "survey", *what, "--python", str(python), "--report", str(report),
               "-j", args.jobs, "--repeat", args.repeat, *(f"--probe={mode}" for mode in args.probe)]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, timeout=SURVEY_TIMEOUT, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    survey = report / "survey.json"
    counts = json.loads(survey.read_text())["counts"] if survey.exists() else {}
    print(f"survey of {len(args.only) or 'the list of'} package(s): {wall:.1f} s wall, exit {proc.returncode}, "
          f"{counts}; {survey}")
    return 0 if proc.returncode in (0, 1) else proc.returncode


def survey_tests(python: Path, report: Path, what: list[str], budget: str, probes: list[str]) -> int:
    """`lifeguard survey --tests` over the list: its table, then the wall time and each candidate."""
    command = [sys.executable, "-m", "lifeguard", "survey", "--tests", *what, "--python", str(python), "--report",
               str(report), "--budget", budget, *(f"--probe={mode}" for mode in probes)]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, timeout=TESTS_TIMEOUT, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    suites = report / "suites.json"
    packages = json.loads(suites.read_text())["packages"] if suites.exists() else []
    candidates = sum(c["verdict"] == "candidate" for p in packages for c in p["candidates"])
    surveyed = sum(not p["problem"] for p in packages)
    print(f"survey --tests of {len(packages)} package(s) ({surveyed} with a suite that ran), budget {budget} s "
          f"each: {wall:.0f} s wall, exit {proc.returncode}, {candidates} candidate(s); {suites}")
    return 0 if proc.returncode in (0, 1) else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
