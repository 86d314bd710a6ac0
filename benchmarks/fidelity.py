"""Fidelity: does a program fail under `lifeguard run` at least as often as without it?

Three real races of lifeguard's bug classes (benchmarks/fidelity_races/: one C++ extension built here with
g++, and a plain script a race), each run N times plain (`python prog.py`) and N times under `lifeguard run
prog.py` (fresh interpreters, -j 1, no other load of ours), interleaved in batches so that the machine's
load hits both alike; then N times under lifeguard with each race's matching perturbation. Prints each
rate with its 95% Wilson interval, and each rate's ratio to the plain rate with its 95% interval (Katz's
log method; a ratio's interval is unbounded when the plain runs never failed).

- finalize: a static C++ object's thread calls into Python every millisecond; exit() joins it in the
  object's destructor, after Py_FinalizeEx (crashes when a call lands after the interpreter is gone); the
  main thread exits at a random phase of the ticker (finalize-aligned: on a tick, a scheduler's tie-break);
- fork: a native thread holds a plain mutex part of the time; the program forks once and the child takes
  the mutex (deadlocks when it was held at fork);
- gc_write: a destructor, freed by gc on another thread, writes to a channel its owner is writing to
  (broken records).

Target: lifeguard's rate >= 0.8x the plain rate; with the matching perturbation >= 5x.

For scale, each program also runs plain beside a neighbour of ours (no lifeguard): a process that wakes every
0.2 ms, and one that computes without pause. How much they move the plain rate is how much a rate depends on
what else the machine runs, which lifeguard's supervisor is part of.

    python benchmarks/fidelity.py [--python PATH ...] [--runs 100] [--batch 10] [--race finalize ...] [--figures]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import record  # noqa: E402

from lifeguard.model.stats import Z_95, wilson_interval  # noqa: E402

RACES_DIR = Path(__file__).resolve().parent / "fidelity_races"
PLAIN_TIMEOUT = 60.0
NEIGHBOURS = {  # a neighbour's name -> its program (a plain Python loop)
    "waking": "import time\nwhile True: time.sleep(0.0002)",
    "busy": "while True: pass",
}
BATCH_TIMEOUT = 900.0
COMPILE_TIMEOUT = 300.0


@dataclass(frozen=True)
class Race:
    name: str
    script: str
    args: tuple[str, ...]
    perturbation: str  # the perturbation that should make it fail more often


RACES = (
    Race("finalize", "finalize.py", (), "exit-starve"),
    Race("finalize-aligned", "finalize.py", ("1000", "aligned"), "exit-starve"),
    Race("fork", "fork.py", ("50", "1000"), "jitter"),
    Race("gc_write", "gc_write.py", ("40",), "gc-thread"),
)


def build(python: str, out_dir: Path) -> None:
    """The races extension for ``python``'s ABI, into ``out_dir``."""
    info = json.loads(subprocess.run(
        [python, "-c", "import json, sysconfig; print(json.dumps([sysconfig.get_paths()['include'], "
                       "sysconfig.get_config_var('EXT_SUFFIX')]))"],
        capture_output=True, text=True, check=True, timeout=PLAIN_TIMEOUT).stdout)
    include, suffix = info
    subprocess.run(["g++", "-O1", "-g", "-std=c++17", "-shared", "-fPIC", "-pthread", f"-I{include}",
                    str(RACES_DIR / "races.cpp"), "-o", str(out_dir / f"races{suffix}")],
                   check=True, timeout=COMPILE_TIMEOUT)


def plain_failures(python: str, argv: list[str], runs: int) -> int:
    failed = 0
    for _ in range(runs):
        try:
            code = subprocess.run([python, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=PLAIN_TIMEOUT, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
        failed += code != 0
    return failed


@contextlib.contextmanager
def neighbour(kind: str) -> Iterator[None]:
    """One of NEIGHBOURS running beside the block; ended (and reaped) after it, whatever happens."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOURS[kind]], stdin=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.kill()
        proc.wait(timeout=PLAIN_TIMEOUT)


def lifeguard_failures(python: str, argv: list[str], runs: int, perturbation: str | None, report: Path) -> int:
    """Failed runs of one `lifeguard run --repeat RUNS` of the program (from its results.jsonl)."""
    shutil.rmtree(report, ignore_errors=True)
    command = [sys.executable, "-m", "lifeguard", "run", "-q", "--python", python, "-j", "1", "--mode", "fresh",
               "--repeat", str(runs), "--report", str(report)]
    if perturbation:
        command += ["--perturb", perturbation]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([*command, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, timeout=BATCH_TIMEOUT, check=False)
    with open(report / "results.jsonl") as results:
        outcomes = [json.loads(line)["outcome"] for line in results if line.strip()]
    if len(outcomes) != runs:
        raise RuntimeError(f"lifeguard finished {len(outcomes)} of {runs} runs ({report})")
    return sum(outcome != "passed" for outcome in outcomes)


def ratio_interval(failed: int, runs: int, base_failed: int, base_runs: int) -> tuple[float, float, float]:
    """The ratio of two failure rates and its 95% interval (Katz's log method, 0.5 added to empty cells)."""
    if base_failed == 0:
        return (math.inf if failed else math.nan, 0.0, math.inf)
    a, b = (failed or 0.5), base_failed
    ratio = (failed / runs) / (base_failed / base_runs)
    spread = Z_95 * math.sqrt(max(0.0, 1 / a - 1 / runs + 1 / b - 1 / base_runs))
    centre = (a / runs) / (b / base_runs)
    return ratio, centre * math.exp(-spread), centre * math.exp(spread)


def rate_text(failed: int, runs: int) -> str:
    low, high = wilson_interval(failed, runs)
    return f"{failed:4d}/{runs:<4d} {failed / runs:6.1%}  (95% CI {low:5.1%}-{high:5.1%})"


def ratio_text(failed: int, runs: int, base_failed: int, base_runs: int) -> str:
    ratio, low, high = ratio_interval(failed, runs, base_failed, base_runs)
    if math.isnan(ratio):
        return "ratio -   (neither failed)"
    if base_failed == 0:
        return "ratio inf (plain never failed)"
    return f"ratio {ratio:5.2f} (95% CI {low:.2f}-{high:.2f})"


def measure(python: str, race: Race, build_dir: Path, runs: int, batch: int, work: Path) -> dict[str, int]:
    argv = [str(RACES_DIR / race.script), str(build_dir), *race.args]
    failed = {"plain": 0, "lifeguard": 0, race.perturbation: 0, **{f"neighbour:{kind}": 0 for kind in NEIGHBOURS}}
    done = 0
    while done < runs:
        size = min(batch, runs - done)
        failed["plain"] += plain_failures(python, argv, size)
        failed["lifeguard"] += lifeguard_failures(python, argv, size, None, work / "report")
        failed[race.perturbation] += lifeguard_failures(python, argv, size, race.perturbation, work / "report")
        for kind in NEIGHBOURS:
            with neighbour(kind):
                failed[f"neighbour:{kind}"] += plain_failures(python, argv, size)
        done += size
    return failed


def label_of(condition: str, short: bool = False) -> str:
    if condition.startswith("neighbour:"):
        return f"plain, {condition.partition(':')[2]} neighbour"
    if condition == "plain":
        return "plain"
    if condition == "lifeguard":
        return "under lifeguard"
    return f"--perturb {condition}" if short else f"under lifeguard --perturb {condition}"


def version_of(python: str) -> str:
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True, timeout=PLAIN_TIMEOUT).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="interpreter of the programs (repeatable; default: this)")
    parser.add_argument("--runs", type=int, default=100, help="runs of each program in each condition")
    parser.add_argument("--batch", type=int, default=10, help="runs of one condition before the next one's")
    parser.add_argument("--race", action="append", choices=[race.name for race in RACES])
    parser.add_argument("--figures", action="store_true", help="record the results in docs/figures.md")
    args = parser.parse_args()
    os.environ.setdefault("LIFEGUARD_CACHE", tempfile.mkdtemp(prefix="lifeguard-fidelity-cache-"))
    chosen = [race for race in RACES if not args.race or race.name in args.race]
    print(f"each program {args.runs} times per condition, plain and under `lifeguard run -j 1`, interleaved "
          f"in batches of {args.batch}; a ratio is that condition's rate over the plain rate")
    figures = []
    for python in args.python or [sys.executable]:
        version = version_of(python)
        with tempfile.TemporaryDirectory(prefix="lifeguard-fidelity-") as folder:
            work = Path(folder)
            build(python, work)
            for race in chosen:
                failed = measure(python, race, work, args.runs, args.batch, work)
                base = failed["plain"]
                print(f"CPython {version}, {race.name}:")
                figures.append(f"CPython {version}, {race.name}: plain {base}/{args.runs}, " + ", ".join(
                    f"{label_of(condition, short=True)} "
                    f"{count}/{args.runs} ({' '.join(ratio_text(count, args.runs, base, args.runs).split())})"
                    for condition, count in failed.items() if condition != "plain"))
                for condition, count in failed.items():
                    label = label_of(condition)
                    line = f"  {label:38s} {rate_text(count, args.runs)}"
                    if condition != "plain":
                        line += "  " + ratio_text(count, args.runs, base, args.runs)
                    print(line, flush=True)
    if args.figures:
        record("fidelity", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
