"""Do perturbations find the stochastic cross-thread-gc bug sooner? Runs and seconds to first failure.

For each set of perturbations, repeats a trial `--trials` times: run the buggy
variant of `request_thread_collects_by_chance` (scenarios/gc_channel.py; no
artificial pause, collections only when allocation thresholds say so) until its
first failure, capped at `--cap` runs, with small request batches (`--batch`, 48) so
that the bug is rare without perturbations. Prints the median runs and seconds to the
first failure, the reproduction rate over all runs with its 95% Wilson interval,
and the ratio against no perturbation, all measured side by side in one session.

    python benchmarks/perturbations.py [--trials 20] [--cap 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS: list[tuple[str, ...]] = [(), ("switch-interval",), ("gc-aggressive",), ("gc-thread",),
                               ("gc-thread", "switch-interval", "jitter")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--cap", type=int, default=200)
    parser.add_argument("--batch", type=int, default=48,
                        help="requests per batch on the request thread (48: rare without perturbations here)")
    args = parser.parse_args()
    os.environ.setdefault("LIFEGUARD_CACHE", tempfile.mkdtemp(prefix="lifeguard-bench-cache-"))
    # The rare form of the scenario: small request batches, few collections off the owner thread.
    os.environ["GC_CHANNEL_REQUEST_BATCH"] = str(args.batch)
    from lifeguard.interpreter import resolve
    from lifeguard.model.stats import wilson_interval
    from lifeguard.plan.discover import discover
    from lifeguard.plan.scheduler import PlanOptions
    from lifeguard.run.engine import Engine

    scenarios = discover([f"{ROOT / 'scenarios' / 'gc_channel.py'}::request_thread_collects_by_chance"])
    interp = resolve()
    rows = []
    for perturbations in SETS:
        runs_to_first, seconds_to_first, total_runs, total_failures = [], [], 0, 0
        for _ in range(args.trials):
            options = PlanOptions(variants=("buggy",), until_fail=True, repeat=args.cap, cores=False,
                                  perturbations=perturbations, mode="fresh")
            start = time.perf_counter()
            session = Engine(interp, jobs=1).run(scenarios, options)
            elapsed = time.perf_counter() - start
            stats = session.summaries[0].stats  # a session keeps no passing run: its summary counts them
            assert stats is not None
            total_runs += stats.runs
            total_failures += stats.failures
            runs_to_first.append(stats.runs_to_first_failure or args.cap + 1)
            seconds_to_first.append(elapsed)
        rows.append((perturbations, statistics.median(runs_to_first), statistics.median(seconds_to_first),
                     total_failures, total_runs))
    base_runs, base_seconds = rows[0][1], rows[0][2]
    print(f"request_thread_collects_by_chance[buggy], Python {interp.version_text}, {args.trials} trials each, "
          f"until first failure (cap {args.cap} runs):")
    print(f"  {'perturbations':38s} {'runs to 1st':>11s} {'s to 1st':>9s} {'rate (95% CI)':>22s} "
          f"{'runs ratio':>10s} {'time ratio':>10s}")
    for perturbations, runs, seconds, failures, total in rows:
        low, high = wilson_interval(failures, total)
        rate = f"{failures / total:5.1%} ({low:.1%}-{high:.1%})"
        name = ",".join(perturbations) or "(none)"
        print(f"  {name:38s} {runs:11.1f} {seconds:9.2f} {rate:>22s} {base_runs / runs:10.1f}x "
              f"{base_seconds / seconds:9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
