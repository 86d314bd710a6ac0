"""What each step of a run's supervision costs, measured alone: so that a regression of throughput.py or
overhead.py shows where it came from.

Each step is lifeguard's own code, timed over many repetitions without a run around it:
- folder: the run's folder and its result channel made (RunFiles.create), then removed as a passed run's is;
- cgroup move: a run's cgroup folder made and a live process moved into it (the supervisor's part of a run's
  start), then the folder's kill and removal at the end (here a member is left to kill, which a passed run
  has not); repetitions are spaced as runs are (RUN_SPACING): a move right after another one is cheaper;
- ancestry: the same for a run tracked by ancestry instead (the pytest plugin's runs);
- relays: the output relays of a run set up, pumped and closed with nothing written;
- spawn: a run's main process started as a bootstrap is (a vfork), and with a step before exec (a fork);
- bootstrap alone: a trivial scenario's child spawned directly, against the same body in a bare interpreter,
  alternating (the child's own share of a fresh run's overhead);
- a supervised run, phase by phase: whole fresh runs (run_once, as the engine starts them) alternating with bare
  spawns of a program that notes when its first line runs; the run's own events give its phases, so the start
  (the supervisor's work before the spawn, the interpreter's start, the bootstrap), the body and the exit
  (finalization, the end seen, the supervisor's work after it) are each set against the bare program's.

The child's modules are byte-compiled first, as every run's supervisor does (precompile_child_side): without
bytecode each child would compile them again.

The processes moved are `sleep` children started outside the timing. Where a step cannot run here (no
writable cgroup hierarchy), it says why and the rest go on.

    python benchmarks/steps.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from _trivial import BODY, timed, write_scenario  # (puts this checkout on sys.path)

from lifeguard.child import protocol
from lifeguard.child.protocol import SPEC_ENV
from lifeguard.interpreter import resolve
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.run.containment import containment, spawn
from lifeguard.run.launch import RunFiles, child_argv, child_env, precompile_child_side, spec_env
from lifeguard.run.relay import Relays
from lifeguard.run.supervise import DEFAULT_OUTPUT_CAP, run_once


def _spec(run_dir: Path) -> RunSpec:
    return RunSpec(scenario="steps", variant="default", index=0, kind=RunKind.FUNCTION, path="", function="",
                   code=None, interpreter=resolve(None), timeout=30.0, run_dir=run_dir, expected="passed")


def folder(root: Path, repeat: int) -> tuple[float, float]:
    """Seconds a run of making its folder and channel, and of removing them."""
    made = gone = 0.0
    for n in range(repeat):
        run_dir = root / f"run-{n}"
        started = time.perf_counter()
        _, events_fd = RunFiles.create(run_dir)
        os.close(events_fd)
        middle = time.perf_counter()
        shutil.rmtree(run_dir)
        made, gone = made + middle - started, gone + time.perf_counter() - middle
    return made / repeat, gone / repeat


# Between two repetitions of a membership step, the time a trivial run takes: a cgroup move pays the kernel's
# RCU grace period only when no other move came just before it, as between runs; back to back, it does not.
RUN_SPACING = 0.03


def membership(repeat: int, by_ancestry: bool) -> tuple[float, float]:
    """Seconds a run of its membership's start (made, and a live process put in it) and of its end (killed,
    reaped, removed)."""
    guard = containment()
    begin = end = 0.0
    for n in range(repeat):
        time.sleep(RUN_SPACING)
        sleeper = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
        try:
            started = time.perf_counter()
            run = guard.for_run(f"steps-{n}-{os.getpid()}", by_ancestry=by_ancestry)
            run.adopt(sleeper.pid)
            middle = time.perf_counter()
            run.close()
            sleeper.kill()
            sleeper.wait(timeout=10)
            begin, end = begin + middle - started, end + time.perf_counter() - middle
        finally:
            if sleeper.poll() is None:
                sleeper.kill()
                sleeper.wait(timeout=10)
    return begin / repeat, end / repeat


def relays(root: Path, repeat: int) -> float:
    """Seconds a run of its two output relays: made, handed to a child that writes nothing, closed."""
    total = 0.0
    for n in range(repeat):
        run_dir = root / f"relay-{n}"
        files, events_fd = RunFiles.create(run_dir)
        os.close(events_fd)
        started = time.perf_counter()
        pair = Relays(_spec(run_dir), files.stdout, files.stderr, DEFAULT_OUTPUT_CAP, None)
        pair.started()  # the child has its ends: ours are closed
        pair.close()
        total += time.perf_counter() - started
        shutil.rmtree(run_dir)
    return total / repeat


def spawn_cost(repeat: int) -> tuple[float, float]:
    """Seconds a run's main process takes to start (Popen's return: the exec done), spawned as a run's
    bootstrap is (no step between fork and exec: a vfork) and with a step before exec (a fork of this whole
    process, as before 3.11 or for a command); the child's own run is not timed."""
    python = resolve(None).executable
    took = {True: 0.0, False: 0.0}
    for _ in range(repeat):
        for bare in (True, False):
            started = time.perf_counter()
            child = spawn([python, "-c", "pass"], None, waits_for_cgroup=bare, stdin=subprocess.DEVNULL)
            took[bare] += time.perf_counter() - started
            child.wait(timeout=30)
    return took[True] / repeat, took[False] / repeat


def bootstrap_cost(root: Path, repeat: int) -> tuple[float, float]:
    """Seconds a trivial scenario's run takes in a bootstrap spawned directly (its start-up, evidence
    machinery and exit; no supervisor, no cgroup), and the same body in a bare interpreter, alternating: the
    child's own share of a fresh run's overhead."""
    scenario = write_scenario(root)
    python = resolve(None).executable
    child = bare = 0.0
    for n in range(repeat):
        run_dir = root / f"boot-{n}"
        spec = replace(_spec(run_dir), path=str(scenario), function="trivial")
        files, events_fd = RunFiles.create(run_dir)
        env = dict(os.environ, **child_env(spec, f"steps-{n}", events_fd=events_fd), **{SPEC_ENV: spec_env(spec)})
        try:
            child += timed(child_argv(spec), env, timeout=60, pass_fds=(events_fd,), cwd=run_dir)
            bare += timed([python, "-X", "faulthandler", "-c", BODY], timeout=60)
        finally:
            os.close(events_fd)
            shutil.rmtree(files.run_dir, ignore_errors=True)
    return child / repeat, bare / repeat


# The bare program of the timeline: it writes when its first line runs to the descriptor it is given.
MARK = "import os, time; os.write({fd}, repr(time.time()).encode()); " + BODY


def _bare_marked(python: str) -> tuple[float, float]:
    """A bare spawn of MARK: (from the spawn to its first line, from there to its end seen), in seconds."""
    read_end, write_end = os.pipe()
    try:
        spawned = time.time()
        proc = subprocess.Popen([python, "-X", "faulthandler", "-c", MARK.format(fd=write_end)], pass_fds=(write_end,),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write_end)
        write_end = -1
        pidfd = os.pidfd_open(proc.pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], 60)
        finally:
            os.close(pidfd)
        ended = time.time()
        if not ready or proc.wait(timeout=10) != 0:
            raise RuntimeError("a bare spawn failed or outlived 60 s")
        first = float(os.read(read_end, 64))
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return first - spawned, ended - first


TIMELINE_PHASES = ("start (supervisor's before-spawn, interpreter, bootstrap)", "bootstrap to body start", "body",
                   "body end to last atexit callback", "exit (finalization, end seen, supervisor's after-exit)")


def timeline(root: Path, repeat: int) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Median seconds of each phase of a supervised fresh run (TIMELINE_PHASES), the bare program's start and
    exit, the median of a whole run's excess over the bare spawn just before it, and that of a bare spawn."""
    scenario = write_scenario(root)
    python = resolve(None).executable
    phases: dict[str, list[float]] = {name: [] for name in TIMELINE_PHASES}
    bare: dict[str, list[float]] = {"start": [], "exit": []}
    runs: list[float] = []  # each run less the bare spawn just before it
    for n in range(repeat):
        start, end = _bare_marked(python)
        bare["start"].append(start)
        bare["exit"].append(end)
        spec = replace(_spec(root / f"run-{n}"), path=str(scenario), function="trivial", cores=True)
        began = time.time()
        result = run_once(spec)
        ended = time.time()
        if result.outcome.value != "passed":
            raise RuntimeError(f"a trivial run did not pass: {result.outcome.value}")
        times: dict[str, float] = {}
        with open(spec.run_dir / protocol.EVENTS_FILE, "rb") as events:
            for line in events:
                record = json.loads(line)
                times.setdefault(record[protocol.EVENT_KEY], record["time"])
        marks = [began, times[protocol.STARTED], times[protocol.BODY_START], times[protocol.BODY_END],
                 times[protocol.ATEXIT_DONE], ended]
        for name, (a, b) in zip(TIMELINE_PHASES, zip(marks, marks[1:], strict=False), strict=True):
            phases[name].append(b - a)
        runs.append(ended - began - start - end)
        shutil.rmtree(spec.run_dir, ignore_errors=True)
    return ({name: statistics.median(values) for name, values in phases.items()},
            {name: statistics.median(values) for name, values in bare.items()},
            statistics.median(runs), statistics.median(s + e for s, e in zip(bare["start"], bare["exit"], strict=True)))


def measure(repeat: int, say: Callable[[str], None] = print) -> None:
    """Print each step's cost a run (ms); a step that cannot run here says why."""
    root = Path(tempfile.mkdtemp(prefix="lifeguard-steps-"))
    interpreter = resolve(None)
    precompile_child_side(interpreter.executable, interpreter.version)  # as every run's supervisor does
    try:
        say(f"supervision steps, each alone, {repeat} repetitions (ms a run):")
        made, gone = folder(root, repeat)
        say(f"  folder: made {made * 1000:.2f}, removed {gone * 1000:.2f}")
        for name, by_ancestry in (("cgroup", False), ("ancestry", True)):
            if name == "cgroup" and containment().session is None:
                say(f"  cgroup: not measured ({containment().why_not_cgroup or 'no cgroup here'})")
                continue
            try:
                begin, end = membership(repeat, by_ancestry)
            except OSError as exc:
                say(f"  {name}: not measured ({exc})")
                continue
            say(f"  membership by {name}: start {begin * 1000:.2f} (made, a process put in), end {end * 1000:.2f}")
        say(f"  relays: {relays(root, repeat) * 1000:.2f} (made, started, closed)")
        vfork, forked = spawn_cost(repeat)
        say(f"  spawn: {vfork * 1000:.2f} as a run's bootstrap (no pre-exec step), {forked * 1000:.2f} with one")
        child, bare = bootstrap_cost(root, repeat)
        say(f"  bootstrap alone: a trivial run {child * 1000:.2f}, a bare interpreter {bare * 1000:.2f} "
            f"({(child - bare) * 1000:+.2f}: imports, evidence machinery, exit)")
        phases, bare_phases, excess, whole_bare = timeline(root, repeat)
        say(f"  a supervised fresh run (run_once), phase by phase, medians; a bare spawn of the same body before each: "
            f"bare {whole_bare * 1000:.2f}, a run {excess * 1000:+.2f} more (the median of the pairs' differences)")
        for name, value in phases.items():
            against = {TIMELINE_PHASES[0]: bare_phases["start"], TIMELINE_PHASES[-1]: bare_phases["exit"]}.get(name)
            versus = f" (bare {against * 1000:.2f}: {(value - against) * 1000:+.2f})" if against is not None else ""
            say(f"    {name}: {value * 1000:.2f}{versus}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        containment().close()


def steps_report(repeat: int = 100) -> None:
    """``measure`` for another benchmark: a step's failure is printed, never that benchmark's end."""
    try:
        measure(repeat)
    except Exception as exc:
        print(f"supervision steps: not measured ({type(exc).__name__}: {exc})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    measure(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
