"""Each probe mode on the bug it is for: tests/integration/fixtures_native/probe_modes, buggy and fixed.

One small extension holds one bug per mode (see its header). The buggy build fails the mode made for its bug,
in the phase the bug lives in; the fixed build passes; a bug of one kind does not show in a mode made to keep
it apart (a pool that cannot be used in a forked child finalizes there fine). The hung runs end early, once
every thread of their tree is blocked, long before their deadline, with the forked child's stacks kept.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from lifeguard.build import build_fixture
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED
from lifeguard.interpreter import resolve
from lifeguard.plan.probes import FORK_CHILD_SHARE, HANG_SETTLE
from tests.helpers import FREE_THREADED, Pace, load_report, run_cli

# Long, so that a run ending early is told from one that waited: a hung run must end before its forked child's
# own deadline (FORK_CHILD_SHARE of this), which is itself well past start-up + HANG_SETTLE + capture.
TIMEOUT_AT_LEAST = 40

HOOKS = """
    import subprocess
    import sys
    import time

    _pool = []


    def exercise(pm, probe):
        '''One use per probe mode, each reaching the bug that mode is for.'''
        if probe.kind == "exit":  # native code keeps a Python callback, past finalization
            data = [1, 2, 3]
            assert pm.keep_callback(probe.callback(data)) == 1
            return data
        if probe.kind == "fork-use":
            return shared_pool(pm)
        if probe.kind == "fork-finalize":
            return pm.Joiner()
        if probe.kind == "fork-exit":
            return pm.install_atfork()
        if probe.kind == "gc-cycle":
            node = pm.Node()
            node.attach(node)
            return node
        raise AssertionError(probe.kind)


    def shared_pool(pm):
        '''A process-wide pool, as OpenMP's: a forked child uses the one it inherited.'''
        if not _pool:
            _pool.append(pm.Pool())
        assert _pool[0].run(21) == 42


    def device(pm):
        return pm.Device()


    def slow_but_alive(pm, probe):
        '''Neither hung nor busy for long stretches: sleeps in a loop that prints, then waits for a subprocess
        that computes. Each stretch lasts longer than the settle period.'''
        stretch = STRETCH
        end = time.monotonic() + stretch
        while time.monotonic() < end:
            print("still working", flush=True)
            time.sleep(0.2)
        busy = f"import time\\nend = time.monotonic() + {stretch}\\nwhile time.monotonic() < end: pass\\n"
        subprocess.run([sys.executable, "-c", busy], check=True, timeout=stretch * 10)
        return device(pm)  # the module is used: a probe that used nothing of it is not exercised, not clean
"""
MODES = ("exit", "fork-use", "fork-finalize", "fork-exit", "gc-cycle")
# What each mode finds in the buggy build: outcome, phase.
BUGGY = {"exit": ("crashed", "exit"), "fork-use": ("hung", "fork-child"), "fork-finalize": ("hung", "fork-child"),
         "fork-exit": ("hung", "fork-child"), "gc-cycle": ("crashed", "run")}
HUNG_CULPRITS = {"fork-use": "pool_run", "fork-finalize": "joiner_dealloc", "fork-exit": "registry_after_fork_in_child"}


@pytest.fixture(scope="module")
def builds() -> dict[str, Path]:
    near = Path(__file__).parent
    return {variant: build_fixture("probe_modes", variant, resolve(), near=near).directory
            for variant in ("buggy", "fixed")}


def _probe(tmp_path: Path, build: Path, hook: str, modes: tuple[str, ...], timeout: float,
           extra: str = "") -> tuple[int, dict[str, dict], str]:
    (tmp_path / "hooks.py").write_text(textwrap.dedent(HOOKS) + extra)
    report = tmp_path / "report"
    args = ["probe", "probe_modes", "--path", str(build), "--hook", f"hooks.py:{hook}", "--timeout", f"{timeout:g}",
            "--report", str(report), "-j", "2"]
    for mode in modes:
        args += ["--probe", mode]
    proc = run_cli(*args, cwd=tmp_path, timeout=timeout * len(modes) + 120)
    output = proc.stdout + proc.stderr
    assert (report / "report.json").exists(), output
    runs = {run["scenario"].partition("[")[0].removeprefix("probe-"): run for run in load_report(report)["runs"]}
    assert set(runs) == set(modes), output
    return proc.returncode, runs, output


def test_each_mode_finds_its_bug_in_its_phase_and_hangs_end_early(tmp_path: Path, builds: dict[str, Path],
                                                                    pace: Pace) -> None:
    timeout = pace.deadline(TIMEOUT_AT_LEAST)
    code, runs, output = _probe(tmp_path, builds["buggy"], "exercise", MODES, timeout)
    assert code == EXIT_UNEXPECTED, output
    assert {mode: (run["outcome"], run["phase"]) for mode, run in runs.items()} == BUGGY, output
    # The late Py_DECREF aborts in CPython's checks up to 3.13; 3.14 crashes reading the thread state it has not,
    # and so does a free-threaded build (its reference count is owned per thread).
    late_decref = "SIGSEGV" if sys.version_info >= (3, 14) or FREE_THREADED else "SIGABRT"
    assert runs["exit"]["signal_name"] == late_decref and "release_callbacks" in output, output
    for mode, function in HUNG_CULPRITS.items():
        run = runs[mode]
        # Ended by the early detection, before even the forked child's own deadline: never at the run's.
        assert run["reason"].startswith(f"ended early: every thread blocked for {HANG_SETTLE:.1f} s"), run["reason"]
        assert run["duration"] < timeout * FORK_CHILD_SHARE, (mode, run["duration"], timeout)
        # The forked child is the process whose parent is in the evidence too (never "the higher pid": pids wrap
        # around at pid_max, 32768 here, several times over a CI run).
        pids = {p["pid"] for p in run["backtraces"]}
        child = [p for p in run["backtraces"] if p.get("ppid") in pids]
        frames = [f["function"] for p in child for t in p["threads"] for f in t["frames"]]
        assert function in frames, (mode, frames)  # the hung forked child's native stack is in the evidence
        if mode != "fork-exit":  # (a child stuck inside fork() never ran Python code of its own)
            python = [f for p in child for t in p["threads"] for f in t["frames"] if f["is_python"]]
            assert python, (mode, frames)  # and its Python frames
            assert len(run["python_stacks"]) == 2, (mode, run["python_stacks"].keys())  # both processes' dumps


def test_the_fixed_build_passes_every_mode(tmp_path: Path, builds: dict[str, Path], pace: Pace) -> None:
    code, runs, output = _probe(tmp_path, builds["fixed"], "exercise", MODES, pace.deadline(TIMEOUT_AT_LEAST))
    assert code == EXIT_OK, output
    assert {run["outcome"] for run in runs.values()} == {"passed"}, output


def test_a_pool_unusable_in_a_child_fails_fork_use_and_finalizes_there_fine(tmp_path: Path, builds: dict[str, Path],
                                                                            pace: Pace) -> None:
    """The cause fork-use mixed in: a documented limit (a pool that is not fork-safe) is not a finalize bug."""
    code, runs, output = _probe(tmp_path, builds["buggy"], "shared_pool", ("fork-use", "fork-finalize"),
                                pace.deadline(TIMEOUT_AT_LEAST))
    assert code == EXIT_UNEXPECTED, output
    assert (runs["fork-use"]["outcome"], runs["fork-use"]["phase"]) == ("hung", "fork-child"), output
    assert runs["fork-finalize"]["outcome"] == "passed", output


@pytest.mark.parametrize(("variant", "outcome"), [("buggy", ("crashed", "fork-child", "SIGSEGV")),
                                                  ("fixed", ("passed", None, None))])
def test_a_crash_in_the_forked_child_is_the_fork_childs(tmp_path: Path, builds: dict[str, Path], pace: Pace,
                                                         variant: str, outcome: tuple) -> None:
    """A destructor writing to a page the child does not have (MADV_DONTFORK): the child dies, the parent lives."""
    _, runs, output = _probe(tmp_path, builds[variant], "device", ("fork-finalize",), pace.deadline(TIMEOUT_AT_LEAST))
    run = runs["fork-finalize"]
    assert (run["outcome"], run["phase"], run["signal_name"]) == outcome, output
    if variant == "buggy":
        assert "device_dealloc" in output, output


def test_a_slow_run_that_sleeps_prints_and_waits_on_computing_children_is_not_ended_early(
        tmp_path: Path, builds: dict[str, Path], pace: Pace) -> None:
    stretch = 1.5 * HANG_SETTLE
    timeout = pace.deadline(TIMEOUT_AT_LEAST) + 2 * stretch
    code, runs, output = _probe(tmp_path, builds["fixed"], "slow_but_alive", ("exit",), timeout,
                                extra=f"\nSTRETCH = {stretch}\n")
    assert code == EXIT_OK, output
    assert runs["exit"]["outcome"] == "passed" and runs["exit"]["duration"] >= 2 * stretch, output
