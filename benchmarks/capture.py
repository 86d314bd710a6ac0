"""How long native evidence takes: lifeguard's chosen back end against plain gdb and plain pystack.

Starts real processes, each parked on a handshake ("ready" on stdout, then blocked on a
lock for good), and times in one run, side by side:

- lifeguard: ``capture_process`` with the back ends available here (what the hang hook runs
  for every process of a tree; the first that reads the process wins),
- plain ``gdb -batch -nx -p PID -ex "thread apply all bt"``,
- plain ``pystack remote --native-all PID`` (when installed),

for a small idle Python process (3 threads) and one that has imported torch and run a
matrix product (its OpenMP threads up). Then a tree of 3 processes (a parent and two forked
children) captured in parallel by the hang hook, and crash cores of both (lifeguard's core
reader vs ``gdb -batch -nx EXE CORE`` vs ``pystack core --native-all``) when the kernel
writes cores into the working directory, and the whole escalation ladder of a hanging
scenario run through the engine. Target: at most 0.5 s per process.

torch comes from a venv of its own (``--torch-venv``, default ~/.cache/lifeguard/bench-torch),
created and filled with ``pip install torch==2.13.0`` when missing; the torch rows are
skipped, saying why, when that fails.

    python benchmarks/capture.py [--runs 5] [--gdb-runs 2] [--no-cores] [--no-ladder]
"""

from __future__ import annotations

import argparse
import os
import resource
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

from figures import record  # noqa: E402

from lifeguard.capture.bounded import run_bounded  # noqa: E402
from lifeguard.capture.cores import core_setup  # noqa: E402
from lifeguard.capture.native import (  # noqa: E402
    analyse_crash_cores,
    available_hang_backends,
    capture_process,
    fallback_hang_hook,
)
from lifeguard.capture.threadstate import SAMPLE_WINDOW  # noqa: E402
from lifeguard.model.stacks import ProcessStacks  # noqa: E402
from lifeguard.run.launch import core_files  # noqa: E402
from lifeguard.run.supervise import HangContext  # noqa: E402

TARGET_SECONDS = 0.5
TOOL_TIMEOUT = 120.0
READY_TIMEOUT = 120.0  # importing torch on a loaded machine
INSTALL_TIMEOUT = 1800.0
TORCH_REQUIREMENT = "torch==2.13.0"
DEFAULT_TORCH_VENV = Path.home() / ".cache" / "lifeguard" / "bench-torch"

# Two threads blocked on a lock main holds, main joining the first; with --torch, torch imported and
# its intra-op thread pool started first. With --crash, main reads address 0 (SIGSEGV) instead of joining.
PARKED_PROGRAM = textwrap.dedent(
    """
    import sys, threading
    if "--torch" in sys.argv:
        import torch
        torch.mm(torch.ones(256, 256), torch.ones(256, 256))
    lock = threading.Lock()
    lock.acquire()
    workers = [threading.Thread(target=lock.acquire, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    if "--crash" in sys.argv:
        import ctypes
        ctypes.string_at(0)
    print("ready", flush=True)
    workers[0].join()
    """
)

# A parent and two forked children, all blocked on a lock the parent held when it forked.
TREE_PROGRAM = textwrap.dedent(
    """
    import os, threading
    lock = threading.Lock()
    lock.acquire()
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            lock.acquire()  # the child's copy of the lock is held too: blocked for good
        children.append(pid)
    print("ready", *children, flush=True)
    lock.acquire()
    """
)


def torch_python(venv: Path, log: Path) -> tuple[str | None, str]:
    """The torch venv's interpreter, created and filled when missing; (None, why) when it cannot be."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import torch"]
    if python.exists() and run_bounded(check, TOOL_TIMEOUT).returncode == 0:
        return str(python), ""
    base = getattr(sys, "_base_executable", None) or sys.executable
    print(f"creating {venv} and installing {TORCH_REQUIREMENT} into it (log: {log}) ...", flush=True)
    steps = [[base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", TORCH_REQUIREMENT]]
    for step in steps:
        run = run_bounded(step, INSTALL_TIMEOUT)
        log.write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"`{' '.join(step[-3:])}` failed: {tail}"
    if run_bounded(check, TOOL_TIMEOUT).returncode != 0:
        return None, "torch installed but does not import"
    return str(python), ""


def start_parked(python: str, folder: Path, *flags: str, program: str = PARKED_PROGRAM) -> subprocess.Popen[bytes]:
    return start_parked_saying(python, folder, *flags, program=program)[0]


def start_parked_saying(python: str, folder: Path, *flags: str,
                        program: str = PARKED_PROGRAM) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``program`` and wait for its "ready" line; the process and that line."""
    script = folder / "parked.py"
    script.write_text(program)
    process = subprocess.Popen([python, str(script), *flags], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True, cwd=folder)
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT)
    line = process.stdout.readline().decode(errors="replace") if readable else ""
    if "ready" not in line:
        stop(process)
        raise SystemExit(f"the parked program ({python} {' '.join(flags)}) did not get ready")
    return process, line


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=TOOL_TIMEOUT)


def pystack_cli() -> str | None:
    """The pystack command of this interpreter's environment (a venv's bin need not be on PATH)."""
    beside = Path(sys.executable).parent / "pystack"
    return str(beside) if beside.exists() else shutil.which("pystack")


def tool(argv: list[str]) -> Callable[[], object]:
    def action() -> object:
        run = run_bounded(argv, TOOL_TIMEOUT)
        if run.timed_out:
            raise SystemExit(f"{argv[0]} did not finish in {TOOL_TIMEOUT} s")
        return run

    return action


def median_seconds(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def ours_live(pid: int) -> Callable[[], object]:
    backends = available_hang_backends()

    def action() -> ProcessStacks:
        stacks = capture_process(pid, backends)
        if not stacks.ok:
            raise SystemExit(f"lifeguard could not read {pid}: {stacks.error}")
        return stacks

    return action


FIGURES: list[str] = []  # a line a row, for --figures


def compare(label: str, ours: tuple[str, float], others: dict[str, float | None]) -> None:
    name, seconds = ours
    FIGURES.append(f"{label}: lifeguard ({name}) **{seconds:.3f} s**" + "".join(
        f"; {other} {value:.3f} s" for other, value in others.items() if value is not None))
    verdict = "meets" if seconds <= TARGET_SECONDS else "MISSES"
    print(f"{label}: lifeguard ({name}) {seconds:.3f} s  [{verdict} the {TARGET_SECONDS} s target]")
    for other, value in others.items():
        if value is None:
            print(f"    {other:<44} not installed")
        else:
            print(f"    {other:<44} {value:7.3f} s   lifeguard / {other.split()[0]} = {seconds / value:.3f}")


def live_rows(pythons: dict[str, str], work: Path, runs: int, gdb_runs: int) -> None:
    gdb, pystack = shutil.which("gdb"), pystack_cli()
    for label, (python, flags) in {k: (v, ("--torch",) if "torch" in k else ()) for k, v in pythons.items()}.items():
        folder = work / label.replace(" ", "-")
        folder.mkdir()
        process = start_parked(python, folder, *flags)
        try:
            pid = process.pid
            ours = ours_live(pid)
            stacks = ours()  # also the first, cold read of the libraries' files
            assert isinstance(stacks, ProcessStacks)
            seconds = median_seconds(ours, runs)
            others: dict[str, float | None] = {
                'gdb -batch -nx -ex "thread apply all bt"': median_seconds(
                    tool([gdb, "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt"]), gdb_runs)
                if gdb else None,
                "pystack remote --native-all": median_seconds(
                    tool([pystack, "remote", "--native-all", str(pid)]), runs) if pystack else None,
            }
        finally:
            stop(process)
        compare(f"live, {label} ({len(stacks.threads)} threads)", (stacks.backend_label, seconds), others)


def tree_row(python: str, work: Path, runs: int) -> None:
    folder = work / "tree"
    folder.mkdir()
    process, line = start_parked_saying(python, folder, program=TREE_PROGRAM)
    children = [int(pid) for pid in line.split()[1:]]
    try:
        pids = [process.pid, *children]
        hook = fallback_hang_hook(available_hang_backends())
        result = hook(HangContext(None, pids))  # type: ignore[arg-type]  # the hook reads only pids
        if len(result) != 3 or not all(p.ok for p in result):
            raise SystemExit(f"tree capture failed: {[str(p) for p in result]}")
        seconds = median_seconds(lambda: hook(HangContext(None, pids)), runs)  # type: ignore[arg-type]
        one = median_seconds(ours_live(pids[0]), runs)
    finally:
        stop(process)  # the forked children are in its session: killed with it
    labels = ", ".join(sorted({p.backend_label for p in result}))
    print(f"tree of 3 processes, in parallel: lifeguard ({labels}) {seconds:.3f} s for all three "
          f"({seconds / 3:.3f} s a process; one alone {one:.3f} s)")


def make_core(python: str, folder: Path, *flags: str) -> Path | None:
    script = folder / "crash.py"
    script.write_text(PARKED_PROGRAM)

    def allow_cores() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    subprocess.run([python, str(script), "--crash", *flags], cwd=folder, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=allow_cores,
                   timeout=READY_TIMEOUT, check=False)
    cores = core_files(folder)
    return cores[0] if cores else None


def core_reader(core: Path, exe: str) -> Callable[[], ProcessStacks]:
    def action() -> ProcessStacks:
        [stacks], _ = analyse_crash_cores([core], exe, keep=True)
        if not stacks.ok:
            raise SystemExit(f"lifeguard could not read {core}: {stacks.error}")
        return stacks

    return action


def core_rows(pythons: dict[str, str], work: Path, runs: int, gdb_runs: int) -> None:
    setup = core_setup()
    if not setup.usable:
        print(f"cores: skipped ({setup.note})")
        return
    gdb, pystack = shutil.which("gdb"), pystack_cli()
    for label, python in pythons.items():
        folder = work / ("core-" + label.replace(" ", "-"))
        folder.mkdir()
        core = make_core(python, folder, *(("--torch",) if "torch" in label else ()))
        if core is None:
            print(f"core, {label}: skipped (no core file was written)")
            continue
        exe = os.path.realpath(python)
        ours = core_reader(core, exe)
        stacks = ours()
        seconds = median_seconds(ours, runs)
        others: dict[str, float | None] = {
            'gdb -batch -nx -ex "thread apply all bt"': median_seconds(
                tool([gdb, "-batch", "-nx", "-ex", "thread apply all bt", exe, str(core)]), gdb_runs)
            if gdb else None,
            "pystack core --native-all": median_seconds(
                tool([pystack, "core", "--native-all", str(core), exe]), runs) if pystack else None,
        }
        size = core.stat().st_size / 2**20
        compare(f"core, {label} ({size:.0f} MiB, {len(stacks.threads)} threads)", (stacks.backend_label, seconds),
                others)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each fast reader (median)")
    parser.add_argument("--gdb-runs", type=int, default=2, help="timed runs of plain gdb (slow with torch)")
    parser.add_argument("--python", default=os.path.realpath(sys.executable), help="interpreter of the small rows")
    parser.add_argument("--torch-venv", type=Path, default=DEFAULT_TORCH_VENV)
    parser.add_argument("--no-cores", action="store_true", help="skip the crash core rows")
    parser.add_argument("--no-ladder", action="store_true", help="skip the whole-ladder (deadline to evidence) row")
    parser.add_argument("--figures", action="store_true", help="record the rows in docs/figures.md")
    args = parser.parse_args(argv)
    backends = available_hang_backends()
    if not backends:
        print("no capture back end is available here (pip install pystack; apt-get install elfutils gdb)")
        return 2
    print("back ends, in order: " + ", ".join(f"{b.name} {b.available()}" for b in backends))
    print(f"medians of {args.runs} runs ({args.gdb_runs} for gdb); the hang hook adds a {SAMPLE_WINDOW} s kernel "
          "state sample before the stacks")
    with tempfile.TemporaryDirectory(prefix="lifeguard-bench-") as folder:
        work = Path(folder)
        pythons = {"small Python": args.python}
        torch, why = torch_python(args.torch_venv, work / "torch-install.log")
        if torch is None:
            print(f"torch rows skipped: {why}")
        else:
            pythons["Python with torch"] = torch
        live_rows(pythons, work, args.runs, args.gdb_runs)
        tree_row(args.python, work, args.runs)
        if not args.no_cores:
            core_rows(pythons, work, args.runs, args.gdb_runs)
    if not args.no_ladder:
        ladder = deadline_to_evidence(args.runs)
        print(f"whole ladder, deadline to complete evidence (kernel sample + stacks + faulthandler dumps + kill + "
              f"findings) of a 3-thread hang run, median of {args.runs}: {ladder:.3f} s")
        FIGURES.append(f"a 3-thread hang, its deadline to complete evidence (kernel sample, stacks, faulthandler "
                       f"dumps, kill, findings): **{ladder:.3f} s**")
    if args.figures:
        record("capture", FIGURES)
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
    from lifeguard.interpreter import resolve
    from lifeguard.plan.discover import discover
    from lifeguard.plan.scheduler import PlanOptions
    from lifeguard.session.setup import SessionSetup, run_session

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
