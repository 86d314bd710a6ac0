"""A probe says what it did with the module, and one that did nothing is ``not exercised``, never clean.

tests/integration/fixtures_native/fork_lock: a thread of the module's own holds a plain mutex 9 ms of every 10;
use() takes it. The buggy build does nothing at fork, so a child forked while the thread holds the mutex waits
for it forever in use(); the fixed build takes the mutex around fork. The fork probe must fork while that
thread is busy (not at the instant the hook returns, before it ever ran) and so catch the deadlock.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lifeguard.build import build_fixture
from lifeguard.child.probe import FORKS
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED
from lifeguard.interpreter import resolve
from tests.helpers import Pace, load_report, run_cli

# The buggy fork runs hang until their deadline (the parent's lock-holding thread keeps moving, so no early
# end): short, but past start-up, the hook and every fork of a fixed run.
TIMEOUT_AT_LEAST = 6
RUNS = 5
CAUGHT_AT_LEAST = 4  # of RUNS: each run forks FORKS times, each caught with the mutex held 9 times in 10

HOOKS = """
    def exercise(fl):
        fl.start_holder()
        return fl.use()


    def wrong_arguments(fl):
        try:
            fl.use("an argument it does not take")
        except TypeError:
            pass


    def nothing(fl):
        return len(dir(fl))
"""


@pytest.fixture(scope="module")
def builds() -> dict[str, Path]:
    near = Path(__file__).parent
    return {variant: build_fixture("fork_lock", variant, resolve(), near=near).directory
            for variant in ("buggy", "fixed")}


def _probe(tmp_path: Path, build: Path, hook: str | None, modes: tuple[str, ...], timeout: float,
           repeat: int = 1) -> tuple[int, list[dict], str]:
    (tmp_path / "hooks.py").write_text(textwrap.dedent(HOOKS))
    report = tmp_path / "report"
    args = ["probe", "fork_lock", "--path", str(build), "--timeout", f"{timeout:g}", "--report", str(report),
            "--no-native", "--repeat", str(repeat)]
    if hook is not None:
        args += ["--hook", f"hooks.py:{hook}"]
    for mode in modes:
        args += ["--probe", mode]
    proc = run_cli(*args, cwd=tmp_path, timeout=(timeout + 30) * repeat * len(modes) + 60)
    output = proc.stdout + proc.stderr
    assert (report / "report.json").exists(), output
    return proc.returncode, load_report(report)["runs"], output


def _records(run: dict) -> list[dict]:
    return [event for event in run["events"] if event["event"] == "probe-exercised"]


def _verdict_line(output: str, mode: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"  {mode} "))


@pytest.mark.parametrize("hook", [None, "nothing", "wrong_arguments"])
def test_a_probe_that_used_nothing_of_the_module_is_not_exercised(tmp_path: Path, builds: dict[str, Path],
                                                                  pace: Pace, hook: str | None) -> None:
    """No hook; a hook that only looks at the module; a hook whose every call of it raises (the generic hook
    on an API that needs arguments): none of them is clean."""
    modes = ("exit", "fork-use", "gc-cycle")
    code, runs, output = _probe(tmp_path, builds["fixed"], hook, modes, pace.deadline(TIMEOUT_AT_LEAST))
    assert code == EXIT_UNEXPECTED, output
    assert len(runs) == len(modes), output
    for run in runs:
        assert run["outcome"] != "passed" and "not exercised" in run["reason"], run["reason"]
        record, = _records(run)
        assert record["exercised"] is False, record
        if hook == "wrong_arguments":  # one call a hook call (the gc probes call the hook many times)
            assert record["calls"] == record["raised"] >= 1, record
        else:
            assert (record["calls"], record["raised"]) == (0, 0), record
        assert not any(event["event"] == "fork-child" for event in run["events"])  # no fork without a use
    for mode in modes:
        assert "not exercised" in _verdict_line(output, mode), output
    assert "clean" not in output


def test_a_clean_probe_says_what_it_did(tmp_path: Path, builds: dict[str, Path], pace: Pace) -> None:
    code, runs, output = _probe(tmp_path, builds["fixed"], "exercise", ("exit", "fork-use"),
                                pace.deadline(TIMEOUT_AT_LEAST))
    assert code == EXIT_OK, output
    for mode in ("exit", "fork-use"):
        line = _verdict_line(output, mode)
        assert "clean" in line and "2 call(s) of the module (0 raised)" in line and "native threads 1 -> 2" in line
    assert f"{FORKS} fork(s) at" in _verdict_line(output, "fork-use"), output


def test_the_fork_probe_forks_while_the_hooks_thread_holds_its_lock(tmp_path: Path, builds: dict[str, Path],
                                                                    pace: Pace) -> None:
    """A hook that starts a lock-holding thread and returns at once: the fork deadlock is caught in at least
    CAUGHT_AT_LEAST of RUNS runs (forking the instant the hook returned caught it in 1 or 2 of 5); the build
    that takes its lock around fork passes every run, forking FORKS times in each."""
    timeout = pace.deadline(TIMEOUT_AT_LEAST)
    code, runs, output = _probe(tmp_path, builds["buggy"], "exercise", ("fork-use",), timeout, repeat=RUNS)
    assert code == EXIT_UNEXPECTED, output
    hung = [run for run in runs if (run["outcome"], run["phase"]) == ("hung", "fork-child")]
    assert len(hung) >= CAUGHT_AT_LEAST, output
    for run in hung:
        record, = _records(run)
        assert record["exercised"] and record["hook_threads"], record
        forks = [event for event in run["events"] if event["event"] == "fork-child"]
        # The hook's thread had run before the fork: it has used CPU time (it took its lock and slept).
        assert forks and all(thread[2] > 0 for thread in forks[-1]["hook_threads"]), forks
    assert "hung@fork-child" in _verdict_line(output, "fork-use"), output

    fixed = tmp_path / "fixed"
    fixed.mkdir()
    code, runs, output = _probe(fixed, builds["fixed"], "exercise", ("fork-use",), timeout, repeat=2)
    assert code == EXIT_OK, output
    assert f"{FORKS} fork(s) at" in _verdict_line(output, "fork-use"), output
