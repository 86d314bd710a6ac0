"""A long stress of a trivial scenario: does the supervisor leak memory, descriptors or processes?

    python benchmarks/soak.py [--runs 10000] [--mode fork-server] [-j 2]
Targets: memory growth under 20 MB, 0 leaked descriptors, 0 leaked processes.
Memory is the supervisor's RSS after a 200-run warm-up against the end (the
warm-up pays for imports and caches that are not growth).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from _trivial import write_scenario


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def our_processes() -> list[int]:
    """Live descendants of this process (zombies included: an unreaped child is a leak too)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(entry))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--mode", default="fork-server", choices=("fresh", "fork-server"))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("LIFEGUARD_CACHE", tempfile.mkdtemp(prefix="lifeguard-soak-cache-"))
    from lifeguard.interpreter import resolve
    from lifeguard.plan.discover import discover
    from lifeguard.plan.scheduler import PlanOptions
    from lifeguard.run.engine import Engine

    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_scenario(Path(tmp))
        scenarios = discover([str(scenario)])
        interp = resolve()
        Engine(interp, jobs=args.jobs).run(scenarios, PlanOptions(repeat=200, mode=args.mode))
        gc.collect()
        rss0, fds0 = rss_mb(), open_fds()
        start = time.perf_counter()
        session = Engine(interp, jobs=args.jobs).run(scenarios, PlanOptions(repeat=args.runs, mode=args.mode))
        elapsed = time.perf_counter() - start
        # results are kept by the session (as any report needs them); count their size apart
        results = len(session.results)
        passed = sum(r.outcome.value == "passed" for r in session.results)
        del session
        gc.collect()
        rss1, fds1 = rss_mb(), open_fds()
        leaked = our_processes()
    print(f"{results} runs ({passed} passed) in {elapsed:.0f}s, mode {args.mode}, -j {args.jobs}: "
          f"{results / elapsed:.0f} runs/s")
    print(f"  supervisor memory growth: {rss1 - rss0:+.1f} MB (target < 20 MB)")
    print(f"  leaked file descriptors:  {fds1 - fds0} (target 0)")
    print(f"  leaked processes:         {len(leaked)} {leaked if leaked else ''}(target 0)")
    return 0 if (rss1 - rss0 < 20 and fds1 == fds0 and not leaked) else 1


if __name__ == "__main__":
    sys.exit(main())
