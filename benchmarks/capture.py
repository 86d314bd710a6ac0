"""How long native evidence of a hung process takes: capture_live against plain gdb.

Starts a 3-thread hung Python process (main joins a thread blocked on a lock, a
third thread blocked on the same lock), then times, in the same run:

- capture_live with an index cache (warm after the first call; the supervisor's case),
- capture_live without the cache, and without Python frames,
- plain ``gdb -p PID -batch -ex "thread apply all bt"`` with gdb's default settings,
- ``pystack remote PID`` when pystack is installed.

Prints the median over --runs of each and its ratio to plain gdb. Target: capture_live
(warm) at or under 0.5 s per process.

    python benchmarks/capture.py [--runs 10] [--python /path/to/python]
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lifeguard.capture import capture_live, find_python_gdb, gdb_available  # noqa: E402

TARGET_SECONDS = 0.5
TOOL_TIMEOUT = 60.0
READY_TIMEOUT = 20.0

HUNG_PROGRAM = textwrap.dedent(
    """
    import threading
    lock = threading.Lock()
    lock.acquire()
    workers = [threading.Thread(target=lock.acquire) for _ in range(2)]
    for worker in workers:
        worker.start()
    print("ready", flush=True)
    workers[0].join()
    """
)


def start_hung(python: str, folder: Path) -> subprocess.Popen[bytes]:
    script = folder / "hung.py"
    script.write_text(HUNG_PROGRAM)
    process = subprocess.Popen(
        [python, str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT)
    if not readable or b"ready" not in process.stdout.readline():
        os.killpg(process.pid, signal.SIGKILL)
        raise SystemExit("the hung program did not start")
    return process


def run_tool(argv: list[str]) -> None:
    """Run an external tool to completion, bounded, killed as a group on timeout."""
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        process.wait(timeout=TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise SystemExit(f"{argv[0]} did not finish in {TOOL_TIMEOUT} s") from None


def median_seconds(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--python", default=os.path.realpath(sys.executable), help="interpreter of the hung process")
    args = parser.parse_args(argv)
    version = gdb_available()
    if version is None:
        print("gdb is not available: nothing to measure")
        return 2
    gdb = shutil.which("gdb") or "gdb"
    with tempfile.TemporaryDirectory(prefix="lifeguard-bench-") as folder:
        work = Path(folder)
        process = start_hung(args.python, work)
        try:
            pid = process.pid
            cache = work / "index-cache"

            def check(**options: object) -> None:
                [stacks] = capture_live([pid], **options)  # type: ignore[arg-type]
                if stacks.error or len(stacks.threads) != 3:
                    raise SystemExit(f"capture failed: {stacks.error} ({len(stacks.threads)} threads)")

            started = time.perf_counter()
            check(cache_dir=cache)
            cold = time.perf_counter() - started
            rows = [
                ("capture_live, index cache (warm)", median_seconds(lambda: check(cache_dir=cache), args.runs)),
                ("capture_live, no index cache", median_seconds(lambda: check(), args.runs)),
                (
                    "capture_live, warm cache, no Python frames",
                    median_seconds(lambda: check(cache_dir=cache, python_frames=False), args.runs),
                ),
                (
                    'plain gdb -p PID -batch -ex "thread apply all bt"',
                    median_seconds(
                        lambda: run_tool([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"]), args.runs
                    ),
                ),
            ]
            pystack = shutil.which("pystack")
            if pystack:
                rows.append(
                    ("pystack remote PID", median_seconds(lambda: run_tool([pystack, "remote", str(pid)]), args.runs))
                )
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    baseline = rows[3][1]
    python_gdb = find_python_gdb(args.python)
    print(f"gdb {version}; hung process: {args.python} (3 threads); python-gdb: {python_gdb or 'not found'}")
    print(f"median of {args.runs} runs; first capture_live (cold index cache): {cold:.3f} s")
    for label, seconds in rows:
        print(f"  {label:<52} {seconds:6.3f} s   x{seconds / baseline:.2f} of plain gdb")
    if not pystack:
        print("  pystack: not installed")
    warm = rows[0][1]
    verdict = "meets" if warm <= TARGET_SECONDS else "misses"
    print(f"capture_live (warm) {verdict} the {TARGET_SECONDS} s per process target")
    end_to_end = deadline_to_evidence(args.runs)
    print(f"whole ladder, deadline to complete evidence (gdb + faulthandler dumps + kill + findings) of a "
          f"3-thread hang run, median of {args.runs}: {end_to_end:.3f} s")
    return 0


HANG_SCENARIO = '''
import lifeguard

@lifeguard.scenario(expect={"default": "hung@run"}, timeout=1)
def three_threads_hang():
    import threading
    lock = threading.Lock()
    lock.acquire()
    workers = [threading.Thread(target=lock.acquire, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    workers[0].join()
'''


def deadline_to_evidence(runs: int) -> float:
    """Run a hanging scenario through the engine; a run's duration minus its deadline is the
    time the escalation ladder took (native capture, Python dumps, tree kill, diagnosis)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from lifeguard.cli.session import SessionSetup, run_session
    from lifeguard.interpreter import resolve
    from lifeguard.plan.discover import discover
    from lifeguard.plan.scheduler import PlanOptions

    with tempfile.TemporaryDirectory(prefix="lifeguard-bench-") as folder:
        path = Path(folder) / "hang.py"
        path.write_text(HANG_SCENARIO)
        scenarios = discover([str(path)])
        results = []
        for _ in range(runs):  # one session each: a series takes native evidence for its first failures only
            options = PlanOptions(repeat=1, mode="fresh")
            session = run_session(scenarios, options, SessionSetup(resolve(), terminal=False))
            results.extend(session.results)
    spent = []
    for result in results:
        threads = sum(len(b.threads) for b in result.backtraces)
        if result.outcome.value != "hung" or threads != 3:
            raise SystemExit(f"unexpected hang evidence: {result} ({threads} threads)")
        spent.append(result.duration - 1.0)
    return statistics.median(spent)


if __name__ == "__main__":
    raise SystemExit(main())
