"""Per-run overhead of `lifeguard run` against bare interpreter spawns, side by side.

Runs a trivial scenario N times through `lifeguard run` (one process, -j 1 and
-j 2), and N bare spawns of the same interpreter with `-X faulthandler` on the
same code, sequentially, alternating the two in rounds so machine noise hits
both alike. Prints the per-run wall times and their ratio (target: <= 1.2 at -j 1).

    python benchmarks/overhead.py [--runs 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trivial import BODY as CODE
from _trivial import ROOT, write_scenario

BARE_TIMEOUT = 30.0


def bare(python: str, runs: int) -> float:
    """The baseline: spawn, and wait on a pidfd with a deadline. (subprocess.run(timeout=...)
    polls with growing sleeps, which would add latency to the baseline and flatter lifeguard.)"""
    start = time.perf_counter()
    for _ in range(runs):
        proc = subprocess.Popen([python, "-X", "faulthandler", "-c", CODE], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pidfd = os.pidfd_open(proc.pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], BARE_TIMEOUT)
        finally:
            os.close(pidfd)
        if not ready:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"a bare spawn did not exit within {BARE_TIMEOUT} s")
        if proc.wait() != 0:
            raise RuntimeError("a bare spawn failed")
    return time.perf_counter() - start


def lifeguard(python: str, scenario: Path, runs: int, jobs: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    subprocess.run([python, "-m", "lifeguard", "run", str(scenario), "--repeat", str(runs), "-j", str(jobs),
                    "--mode", "fresh"],
                   check=True, timeout=600, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    python = os.path.realpath(sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_scenario(Path(tmp))
        times: dict[str, list[float]] = {"bare": [], "lifeguard -j1": [], "lifeguard -j2": []}
        for _ in range(args.rounds):
            times["bare"].append(bare(python, args.runs) / args.runs)
            times["lifeguard -j1"].append(lifeguard(python, scenario, args.runs, 1) / args.runs)
            times["lifeguard -j2"].append(lifeguard(python, scenario, args.runs, 2) / args.runs)
    base = statistics.median(times["bare"])
    print(f"{args.runs} runs x {args.rounds} rounds, Python {sys.version.split()[0]}, median per-run wall time:")
    for name, values in times.items():
        per_run = statistics.median(values)
        print(f"  {name:14s} {per_run * 1000:7.2f} ms   ratio to bare {per_run / base:5.2f}")
    ratio = statistics.median(times["lifeguard -j1"]) / base
    print(f"overhead ratio (lifeguard -j1 / bare): {ratio:.2f}  (target <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
