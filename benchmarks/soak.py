"""A long session of passing runs: does the supervisor's memory stay flat while it runs, and does it leak
descriptors or processes?

    python benchmarks/soak.py [--runs 10000] [--mode fork-server] [-j 2]

It runs ``lifeguard run`` on the trivial scenario (``--repeat RUNS -q --report`` into a temporary folder, so
results.jsonl is streamed and report.json written at the end, as a CI job would) and samples the lifeguard
process *during* the session, every second: VmRSS and open descriptors from /proc/PID, runs finished from
results.jsonl. The growth is the RSS at the last sample against the RSS once 10% of the runs had finished
(start-up, imports and the fork-server are paid by then); measuring after the session, as this script once did,
hides what the session holds until its end.

Targets: growth under 20 MB, descriptors flat, no process left behind (this script makes itself the subreaper
of lifeguard's tree, so an orphan left by lifeguard is re-parented here and found).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _trivial import ROOT, write_scenario

SAMPLE_INTERVAL = 1.0  # seconds between samples of the lifeguard process
GROWTH_TARGET_MB = 20.0
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Sample:
    seconds: float
    runs: int  # lines of results.jsonl so far
    rss_kb: int
    fds: int


def status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (zombies included: an unreaped child is a leak too)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


class LineCounter:
    """Counts the lines of a growing file, reading only what was added since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.lines
        self.offset += len(data)
        self.lines += data.count(b"\n")
        return self.lines


def soak(argv: list[str], results: Path, deadline: float) -> tuple[list[Sample], int, list[int]]:
    """Run ``argv`` (lifeguard), sampling it until it exits: the samples, its exit code, the processes it left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    counter = LineCounter(results)
    samples: list[Sample] = []
    try:
        while proc.poll() is None:
            if time.monotonic() - began > deadline:
                raise SystemExit(f"lifeguard did not finish within {deadline:.0f} s")
            rss, fds = status_kb(proc.pid, "VmRSS"), open_fds(proc.pid)
            if rss is not None and fds is not None:
                samples.append(Sample(time.monotonic() - began, counter.count(), rss, fds))
            try:
                proc.wait(SAMPLE_INTERVAL)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # lifeguard kills its runs' trees on SIGTERM
            proc.wait(60)
    time.sleep(0.5)  # an orphan lifeguard left is re-parented to us as lifeguard exits
    return samples, proc.returncode, children_of(os.getpid())


def at_fraction(samples: list[Sample], total: int, fraction: float) -> Sample:
    wanted = fraction * total
    return next((s for s in samples if s.runs >= wanted), samples[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--mode", default="fork-server", choices=("fresh", "fork-server"))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    # Orphans of lifeguard's tree come to us, not to init, so a leaked process is seen.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    spec = importlib.util.find_spec("lifeguard")
    origin = Path(spec.origin).parent if spec is not None and spec.origin else "?"
    with tempfile.TemporaryDirectory(prefix="lifeguard-soak-") as folder:
        tmp = Path(folder)
        os.environ.setdefault("LIFEGUARD_CACHE", str(tmp / "cache"))
        scenario = write_scenario(tmp)
        report = tmp / "report"
        argv = [sys.executable, "-m", "lifeguard", "run", str(scenario), "--repeat", str(args.runs),
                "--mode", args.mode, "-j", str(args.jobs), "-q", "--report", str(report)]
        print(f"lifeguard from {origin}: {' '.join(argv[1:3])} {scenario.name} {' '.join(argv[5:-2])} "
              f"--report DIR", flush=True)
        samples, code, leaked = soak(argv, report / "results.jsonl", deadline=max(600.0, args.runs * 0.5))
        finished = LineCounter(report / "results.jsonl").count()
        report_mb = (report / "report.json").stat().st_size / 1e6 if (report / "report.json").exists() else 0.0
    if not samples:
        raise SystemExit("lifeguard exited before a sample was taken")
    elapsed = samples[-1].seconds
    print(f"{finished} runs finished (exit {code}) in {elapsed:.0f}s: {finished / max(elapsed, 1e-9):.0f} runs/s, "
          f"mode {args.mode}, -j {args.jobs}; report.json {report_mb:.1f} MB")
    print(f"  supervisor RSS during the session (VmRSS of the lifeguard process, every {SAMPLE_INTERVAL:g} s):")
    for tenth in range(1, 11):
        sample = at_fraction(samples, args.runs, tenth / 10)
        print(f"    {tenth * 10:3d}%  {sample.runs:6d} runs  {sample.rss_kb / 1024:6.1f} MB  {sample.fds:3d} fds")
    first, last = at_fraction(samples, args.runs, 0.1), samples[-1]
    growth_mb = (last.rss_kb - first.rss_kb) / 1024
    runs_between = max(last.runs - first.runs, 1)
    peak = max(s.rss_kb for s in samples) / 1024
    print(f"  last sample: {last.runs} runs, {last.rss_kb / 1024:.1f} MB; peak sampled {peak:.1f} MB")
    print(f"  supervisor memory growth from 10% to the end: {growth_mb:+.1f} MB over {runs_between} runs "
          f"({(last.rss_kb - first.rss_kb) * 1024 / runs_between:+.0f} B a run; target < {GROWTH_TARGET_MB:g} MB)")
    print(f"  open descriptors: {first.fds} at 10%, {last.fds} at the end (target: flat; runs under way hold a "
          "few each)")
    print(f"  leaked processes: {len(leaked)} {leaked if leaked else ''}(target 0)")
    good = (code == 0 and finished == args.runs and growth_mb < GROWTH_TARGET_MB and not leaked
            and last.fds <= first.fds + 3 * args.jobs)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
