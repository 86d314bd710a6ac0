"""The test suite's figure: the README's test command, `python3 -m pytest -q`, timed quiet and with every core
busy, in one run.

Busy means one `python3 -c "while True: pass"` a core, started before the suite and killed by pid after it
(the loaded run a change must pass before it is called done). A loaded run is repeated ``--loaded-runs``
times: the suite must stay free of flakes there. The suite runs in the checkout (or ``--tree``, e.g. a
clean clone) with the interpreter that runs this script.

    python benchmarks/suite.py [--tree DIR] [--loaded-runs 1] [--no-quiet] [--figures]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from _trivial import ROOT
from figures import record

SUITE_TIMEOUT = 3600.0
STOP_GRACE = 60.0  # seconds a stopped suite gets to tear down
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*) in [\d.]+s")


def busy_loops(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            for _ in range(count)]


def suite(tree: Path) -> tuple[int, float, str]:
    """The suite's exit status, wall seconds, and pytest's summary (its counts)."""
    started = time.perf_counter()
    # Its own session: stopped (a deadline, Ctrl-C, SIGTERM), the whole suite goes, workers and their runs.
    suite_process = subprocess.Popen([sys.executable, "-m", "pytest", "-q"], cwd=tree, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
    try:
        output, _ = suite_process.communicate(timeout=SUITE_TIMEOUT)
    finally:
        if suite_process.poll() is None:  # as Ctrl-C: pytest tears its fixtures down, ending what tests started
            os.killpg(suite_process.pid, signal.SIGINT)
            try:
                suite_process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(suite_process.pid, signal.SIGKILL)
                suite_process.wait()
    done = subprocess.CompletedProcess(suite_process.args, suite_process.returncode, output, "")
    took = time.perf_counter() - started
    summary = next((m.group(1) for line in reversed(done.stdout.splitlines())
                    if (m := SUMMARY.match(line.strip()))), "no summary")
    if done.returncode != 0:
        print(done.stdout[-6000:], file=sys.stderr)
    return done.returncode, took, summary


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # through the finally blocks: the suite and the busy loops are killed


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to test (default: this one)")
    parser.add_argument("--loaded-runs", type=int, default=1, help="loaded runs in a row (default 1)")
    parser.add_argument("--no-quiet", action="store_true", help="only the loaded runs")
    parser.add_argument("--figures", action="store_true", help="record the results in docs/figures.md")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    lines, status = [], 0
    if not args.no_quiet:
        code, took, summary = suite(args.tree)
        print(f"quiet: exit {code}, {summary}, {took:.0f} s wall")
        lines.append(f"quiet: **{minutes(took)}**, {summary}, exit {code}")
        status |= code
    loaded = []
    for _ in range(args.loaded_runs):
        loops = busy_loops(cores)
        try:
            code, took, summary = suite(args.tree)
        finally:
            for loop in loops:
                os.kill(loop.pid, signal.SIGKILL)
                loop.wait()
        print(f"{cores} cores busy: exit {code}, {summary}, {took:.0f} s wall")
        loaded.append(f"{minutes(took)} ({summary}, exit {code})")
        status |= code
    if loaded:
        lines.append(f"all {cores} cores busy, {len(loaded)} run{'s' if len(loaded) > 1 else ''} in a row: "
                     + "; ".join(loaded))
    if args.figures:
        # The tree as its role, not as this machine's path of it (a temporary clone's).
        shown = [("CLONE" if arg == str(args.tree) and args.tree != ROOT else arg) for arg in sys.argv]
        record("suite", lines, shown)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
