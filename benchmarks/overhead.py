"""Overhead of `lifeguard run` against bare interpreter spawns, side by side.

1. Per run: a trivial scenario N times through `lifeguard run` (one process, -j 1 and -j 2), and N bare
   spawns of the same interpreter with `-X faulthandler` on the same code, sequentially, alternating the
   two in rounds so machine noise hits both alike. Prints the per-run wall times and their ratio (target:
   <= 1.10 at -j 1), and the spread of the rounds' own ratios. Then what of that is `lifeguard run`'s own
   start and end, paid once a session (a session of one run, less a run), and the ratio without it.
2. A whole program under guard: `lifeguard run -q -- python3 script.py` against plain `python3 script.py`
   for a script that works about 1 s (its work is calibrated on the bare interpreter first), alternating
   the two, the median of each. Prints both and the overhead (target: < 5%).

Both parts use the interpreter of a private virtual environment (under lifeguard's cache) where this checkout
is installed as a user installs the tool (`pip install .`, not editable, byte-compiled): the `lifeguard`
console script is what runs, without PYTHONPATH, and neither side pays for the site hooks of whatever else
this machine's own interpreter has installed.

lifeguard's own modules are byte-compiled first, as an installed wheel's are (PYTHONDONTWRITEBYTECODE would
otherwise make every start compile them again).

    python benchmarks/overhead.py [--runs 200] [--rounds 3] [--program-rounds 7] [--program-seconds 1]
                                  [--program-only] [--figures]
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
from _trivial import ROOT, timed, write_scenario
from figures import record
from steps import steps_report

BARE_TIMEOUT = 30.0


def user_env() -> dict[str, str]:
    """The environment both sides run in: this one without PYTHONPATH (a user's installed lifeguard needs none,
    and every child would pay for searching one more folder) or PYTHONDONTWRITEBYTECODE."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def bare(tool: Path, runs: int) -> float:
    """The baseline: spawn, and wait on a pidfd with a deadline. (subprocess.run(timeout=...)
    polls with growing sleeps, which would add latency to the baseline and flatter lifeguard.)"""
    env = user_env()
    start = time.perf_counter()
    for _ in range(runs):
        proc = subprocess.Popen([str(tool / "python"), "-X", "faulthandler", "-c", CODE], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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


def lifeguard(tool: Path, scenario: Path, runs: int, jobs: int) -> float:
    """Seconds of one `lifeguard run` session of ``runs`` runs, the installed console script."""
    start = time.perf_counter()
    subprocess.run([str(tool / "lifeguard"), "run", str(scenario), "--repeat", str(runs), "-j", str(jobs),
                    "--mode", "fresh"],
                   check=True, timeout=600, env=user_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


SESSION_SAMPLES = 5


def session_cost(tool: Path, scenario: Path, per_run: float) -> float:
    """Seconds of `lifeguard run`'s own start and end, paid once a session (its imports, the scenario file's
    discovery, the session's containment, the reports): the median of a few sessions of one run, less a run."""
    took = [lifeguard(tool, scenario, 1, 1) for _ in range(SESSION_SAMPLES)]
    return max(0.0, statistics.median(took) - per_run)


# The programs: a fixed amount of interpreter work (allocation and collection included), no sleeping; and one
# that sleeps. This machine's CPU speed drifts by tens of percent from one second to the next (a shared VM),
# so the computing program's times are noisy; the sleeping one's are not: its overhead is lifeguard's own cost.
PROGRAM = """\
import sys
total = 0
for i in range(int(sys.argv[1])):
    total += len([j for j in range(50)])
"""
SLEEPER = """\
import sys, time
time.sleep(float(sys.argv[1]))
"""
PROGRAM_TIMEOUT = 120.0
CALIBRATION_SAMPLES = 3


def calibrate(python: str, script: Path, seconds: float) -> int:
    """The loop count that makes the program take about ``seconds`` on the bare interpreter (the median of a
    few timings at the final count's order of magnitude)."""
    count = 20_000
    while True:
        took = statistics.median(timed([python, str(script), str(count)]) for _ in range(CALIBRATION_SAMPLES))
        if took >= seconds / 4:
            return max(1, int(count * seconds / took))
        count *= 4


INSTALL_TIMEOUT = 900.0


def installed_tool(python: str) -> Path:
    """A private venv with this checkout installed (not editable): its bin folder. Made on the first run,
    lifeguard reinstalled every time."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = base / "lifeguard" / "bench" / f"overhead-py{sys.version_info[0]}{sys.version_info[1]}"
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=INSTALL_TIMEOUT)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--force-reinstall", str(ROOT)],
                   check=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return venv / "bin"


def program_overhead(tool: Path, folder: Path, rounds: int, seconds: float) -> list[str]:
    """Prints the comparison; returns its figures, a line a program."""
    python = str(tool / "python")
    env = user_env()
    computing, sleeping = folder / "program.py", folder / "sleeper.py"
    computing.write_text(PROGRAM)
    sleeping.write_text(SLEEPER)
    programs = {"computes": [python, str(computing), str(calibrate(python, computing, seconds))],
                "sleeps": [python, str(sleeping), str(seconds)]}
    print(f"\na program of about {seconds:g} s, {rounds} rounds, `lifeguard run -q -- python3 script.py` and "
          "`python3 script.py` in turn:")
    figures = []
    for what, bare_argv in programs.items():
        guarded_argv = [str(tool / "lifeguard"), "run", "-q", "--", *bare_argv]
        bare_times, guarded_times = [], []
        for _ in range(rounds):
            bare_times.append(timed(bare_argv, env))
            guarded_times.append(timed(guarded_argv, env))
        base = statistics.median(bare_times)
        extra = statistics.median(g - b for g, b in zip(guarded_times, bare_times, strict=True))  # each round's pair
        print(f"  a program that {what}: python3 median {base * 1000:.1f} ms (fastest {min(bare_times) * 1000:.1f}), "
              f"under lifeguard median {statistics.median(guarded_times) * 1000:.1f} ms "
              f"(fastest {min(guarded_times) * 1000:.1f})")
        print(f"overhead of lifeguard run -- on a program that {what} {seconds:g} s: {extra / base * 100:.1f}% "
              f"(the median of the rounds' differences: {extra * 1000:.0f} ms; target < 5%)")
        figures.append(f"a program that {what} {seconds:g} s: **{extra / base * 100:.1f}%** more "
                       f"({extra * 1000:.0f} ms, the median of {rounds} rounds' differences; target < 5%)")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--program-rounds", type=int, default=7)
    parser.add_argument("--program-seconds", type=float, default=1.0)
    parser.add_argument("--program-only", action="store_true", help="only the whole-program comparison")
    parser.add_argument("--figures", action="store_true", help="record the results in docs/figures.md")
    args = parser.parse_args()
    python = os.path.realpath(sys.executable)
    subprocess.run([python, "-m", "compileall", "-q", str(ROOT / "lifeguard")], check=True, timeout=PROGRAM_TIMEOUT,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    if args.program_only:
        with tempfile.TemporaryDirectory() as tmp:
            program = program_overhead(installed_tool(python), Path(tmp), args.program_rounds, args.program_seconds)
        if args.figures:
            record("head-start", program)
        return 0
    tool = installed_tool(python)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_scenario(Path(tmp))
        times: dict[str, list[float]] = {"bare": [], "lifeguard -j1": [], "lifeguard -j2": []}
        for _ in range(args.rounds):
            times["bare"].append(bare(tool, args.runs) / args.runs)
            times["lifeguard -j1"].append(lifeguard(tool, scenario, args.runs, 1) / args.runs)
            times["lifeguard -j2"].append(lifeguard(tool, scenario, args.runs, 2) / args.runs)
        guarded = statistics.median(times["lifeguard -j1"])
        once = session_cost(tool, scenario, guarded)
    base = statistics.median(times["bare"])
    print(f"{args.runs} runs x {args.rounds} rounds, Python {sys.version.split()[0]}, median per-run wall time:")
    for name, values in times.items():
        per_run = statistics.median(values)
        # Each round's ratio to the bare spawns of the same round: the spread says how much the machine moved.
        rounds = [value / bare for value, bare in zip(values, times["bare"], strict=True)]
        print(f"  {name:14s} {per_run * 1000:7.2f} ms   ratio to bare {per_run / base:5.2f}   "
              f"rounds {min(rounds):.2f}-{max(rounds):.2f}")
    ratio = guarded / base
    print(f"overhead ratio (lifeguard -j1 / bare): {ratio:.2f}  (target <= 1.10)")
    print(f"  of which lifeguard run's own start and end, once a session: {once * 1000:.0f} ms "
          f"({once / args.runs * 1000:.2f} ms of each of these {args.runs} runs); the runs alone "
          f"{(guarded - once / args.runs) / base:.2f}")
    steps_report()  # where a run's supervision time goes, step by step
    with tempfile.TemporaryDirectory() as tmp:
        program = program_overhead(tool, Path(tmp), args.program_rounds, args.program_seconds)
    if args.figures:
        record("run-overhead", [
            *(f"{name}: {statistics.median(values) * 1000:.2f} ms a run" for name, values in times.items()),
            f"lifeguard -j1 / bare: **{ratio:.2f}** (target <= 1.10); {args.runs} runs, "
            f"median of {args.rounds} rounds"])
        record("head-start", program)
    return 0


if __name__ == "__main__":
    sys.exit(main())
