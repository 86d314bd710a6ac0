"""Runs per second: warm fork-server against a fresh interpreter per run, side by side.

Also, where pytest-forked is installed, the per-test cost of a `@pytest.mark.forked`
test against lifeguard's fork-server run of the same body.

    python benchmarks/throughput.py [--runs 300] [--rounds 3] [--figures]
Target: fork-server throughput at least 8x fresh; the spread of the rounds' own ratios is printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trivial import write_scenario
from figures import record
from steps import steps_report


def engine_rate(scenario: Path, runs: int, mode: str) -> float:
    """Runs per second of the engine alone (in-process, so interpreter start-up of
    lifeguard itself is not counted against either mode)."""
    from lifeguard.interpreter import resolve
    from lifeguard.plan.discover import discover
    from lifeguard.plan.scheduler import PlanOptions
    from lifeguard.run.engine import Engine

    scenarios = discover([str(scenario)])
    engine = Engine(resolve())
    start = time.perf_counter()
    session = engine.run(scenarios, PlanOptions(repeat=runs, mode=mode))
    elapsed = time.perf_counter() - start
    assert session.all_expected and session.finished == runs
    return runs / elapsed


def pytest_forked_cost(tmp: Path, tests: int) -> float | None:
    try:
        import pytest_forked  # noqa: F401
    except ImportError:
        return None
    test_file = tmp / "test_forked_bench.py"
    test_file.write_text("import pytest\n\n" + "".join(
        f"@pytest.mark.forked\ndef test_{i}():\n    x = sum(range(100))\n\n" for i in range(tests)))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:lifeguard",
                           str(test_file)], timeout=600, cwd=tmp, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # pytest-forked 1.7.5 fails every test on pytest 9.2: say so, keep the rest
        last = (done.stdout.strip().splitlines() or ["no output"])[-1]
        print(f"pytest-forked failed (exit {done.returncode}: {last}): per-test comparison skipped")
        return None
    baseline_start = time.perf_counter()
    (tmp / "test_empty_bench.py").write_text("def test_nothing():\n    pass\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:lifeguard",
                    str(tmp / "test_empty_bench.py")], check=True, timeout=600, cwd=tmp, stdout=subprocess.DEVNULL)
    overhead = time.perf_counter() - baseline_start
    return (baseline_start - start - overhead) / tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--figures", action="store_true", help="record the result in docs/figures.md")
    args = parser.parse_args()
    os.environ.setdefault("LIFEGUARD_CACHE", tempfile.mkdtemp(prefix="lifeguard-bench-cache-"))
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        scenario = write_scenario(tmp)
        fresh, forked = [], []
        for _ in range(args.rounds):
            fresh.append(engine_rate(scenario, args.runs, "fresh"))
            forked.append(engine_rate(scenario, args.runs, "fork-server"))
        fresh_rate, forked_rate = statistics.median(fresh), statistics.median(forked)
        print(f"{args.runs} runs x {args.rounds} rounds, -j 1, Python {sys.version.split()[0]} (median):")
        print(f"  fresh interpreter   {fresh_rate:7.1f} runs/s   {1000 / fresh_rate:6.2f} ms/run")
        print(f"  warm fork-server    {forked_rate:7.1f} runs/s   {1000 / forked_rate:6.2f} ms/run")
        rounds = [forked_round / fresh_round for forked_round, fresh_round in zip(forked, fresh, strict=True)]
        print(f"fork-server throughput / fresh: {forked_rate / fresh_rate:.2f}x  (target >= 8x; "
              f"rounds {min(rounds):.2f}-{max(rounds):.2f}x)")
        steps_report()  # where a run's supervision time goes, step by step
        if args.figures:
            record("throughput", [
                f"fresh interpreter: {fresh_rate:.1f} runs/s ({1000 / fresh_rate:.2f} ms a run)",
                f"warm fork-server: {forked_rate:.1f} runs/s ({1000 / forked_rate:.2f} ms a run)",
                f"fork-server / fresh: **{forked_rate / fresh_rate:.2f}x** (target >= 8x); {args.runs} runs, "
                f"median of {args.rounds} rounds, -j 1"])
        cost = pytest_forked_cost(tmp, min(args.runs, 200))
        if cost is None:
            print("pytest-forked not installed: per-test comparison skipped (pip install pytest-forked)")
        else:
            print(f"  pytest-forked       {cost * 1000:6.2f} ms/test")
            print(f"lifeguard fork-server per-run cost / pytest-forked per-test cost: "
                  f"{(1 / forked_rate) / cost:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
