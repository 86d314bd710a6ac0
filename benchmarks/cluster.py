"""Throughput of `lifeguard run --scheduler` on a local Dask cluster (1 and 2 workers of one thread) against the
local engine (-j 1 and -j 2) on the same plan, side by side in one run, and the per-run cost the cluster adds.

The cluster is started here on the loopback address (a `dask scheduler`, then `dask worker` processes) and
stopped at the end. Each configuration runs the plan once per round; the median of the rounds is kept.

    python benchmarks/cluster.py [--runs 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0
SESSION_TIMEOUT = 900.0
PLAN = """
import lifeguard


@lifeguard.scenario(expect={"default": "passed"}, repeat=1)
def trivial():
    pass
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def wait_for_workers(address: str, count: int) -> None:
    from distributed import Client

    with Client(address, timeout=START_TIMEOUT) as client:
        client.wait_for_workers(count, timeout=START_TIMEOUT)


def session(plan: Path, runs: int, extra: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lifeguard", "run", str(plan), "--repeat", str(runs), "-q",
                           "--no-native", *extra], env=_env(), capture_output=True, text=True,
                          timeout=SESSION_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"lifeguard run {' '.join(extra)} failed:\n{proc.stdout}{proc.stderr}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="lifeguard-cluster-bench-"))
    plan = folder / "plan.py"
    plan.write_text(PLAN)
    scheduler_file = folder / "scheduler.json"
    procs = [start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                    "--scheduler-file", str(scheduler_file), "--no-dashboard"])]
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (scheduler_file.exists() and scheduler_file.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny",
                  "--no-dashboard"]
        times: dict[str, list[float]] = {"local -j 1": [], "local -j 2": [], "cluster 1 worker": [],
                                         "cluster 2 workers": []}
        procs.append(start(worker))
        wait_for_workers(address, 1)
        second: subprocess.Popen[bytes] | None = None
        for _ in range(args.rounds):
            times["local -j 1"].append(session(plan, args.runs, ["-j", "1"]))
            times["local -j 2"].append(session(plan, args.runs, ["-j", "2"]))
            if second is not None:  # back to one worker
                os.killpg(second.pid, signal.SIGKILL)
                second.wait(timeout=30)
                second = None
                time.sleep(1)  # the scheduler notices the loss
            times["cluster 1 worker"].append(session(plan, args.runs, ["--scheduler", address]))
            second = start(worker)
            procs.append(second)
            wait_for_workers(address, 2)
            times["cluster 2 workers"].append(session(plan, args.runs, ["--scheduler", address]))
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{args.runs} trivial runs a session, median of {args.rounds} rounds")
        print(f"{'configuration':<20}{'seconds':>9}{'runs/s':>9}")
        for name, seconds in median.items():
            print(f"{name:<20}{seconds:>9.2f}{args.runs / seconds:>9.1f}")
        added = (median["cluster 1 worker"] - median["local -j 1"]) / args.runs * 1000
        print(f"per-run cost the cluster adds (1 worker against -j 1): {added:.1f} ms")
        print(f"2 workers against 1: {median['cluster 1 worker'] / median['cluster 2 workers']:.2f}x")
        return 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
