"""A probe says what it did with the module, and one that did nothing is ``not exercised``, never clean.

tests/integration/fixtures_native/fork_lock: a thread of the module's own holds a plain mutex 9 ms of every 10;
use() takes it. The buggy build does nothing at fork, so a child forked while the thread holds the mutex waits
for it forever in use(); the fixed build takes the mutex around fork. The fork probe must fork while that
thread is busy (not at the instant the hook returns, before it ever ran) and so catch the deadlock.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from lifeguard.build import build_fixture
from lifeguard.child.fork_schedule import FORKS
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED
from lifeguard.interpreter import resolve
from lifeguard.model.outcomes import Outcome
from lifeguard.model.survey import HookRef, Package
from lifeguard.survey.plan import Probed
from lifeguard.survey.repro import write_reproduction
from tests.helpers import Pace, load_report, run_cli
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

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
        assert (run["outcome"], run["phase"]) == ("not exercised", None), run
        assert "probe used nothing of fork_lock" in run["reason"], run["reason"]
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


def test_a_probe_not_exercised_reads_so_not_as_a_failure_of_the_module(tmp_path: Path, builds: dict[str, Path],
                                                                     pace: Pace) -> None:
    """Its run is "not exercised" with why and its figures, in every sink; no traceback, no failed@run; exit 1."""
    code, runs, output = _probe(tmp_path, builds["fixed"], "nothing", ("exit", "fork-use"),
                                pace.deadline(TIMEOUT_AT_LEAST))
    assert code == EXIT_UNEXPECTED, output
    assert "Traceback" not in output and "failed" not in output and "NotExercised" not in output, output
    for mode in ("exit", "fork-use"):
        assert f"probe-{mode}[fork_lock][default]  1 run: 1 not exercised" in output, output
        assert re.search(rf"probe-{mode}\[fork_lock\]\[default\]#0: not exercised in [0-9.]+s: the {mode} probe "
                         r"used nothing of fork_lock: the hook made 0 calls of it and returned 1 object\(s\)",
                         output), output
    assert {run["outcome"] for run in runs} == {"not exercised"}
    assert all("Traceback" not in run["stderr_tail"] for run in runs), runs


def _reproduce(tmp_path: Path, build: Path, timeout: float | None, runs: int) -> list[subprocess.CompletedProcess[str]]:
    """Write the fork-use reproduction of the hook ``exercise`` and run it ``runs`` times in plain Python, each in
    a session of its own, killed as a group after it ended (a hung forked child is left by design)."""
    tmp_path.mkdir()
    (tmp_path / "hooks.py").write_text(textwrap.dedent(HOOKS))
    package = Package("fork_lock", "1.0", ("fork_lock",), ("fork_lock",), (),
                      HookRef("user", str(tmp_path / "hooks.py"), "exercise"))
    seen = SimpleNamespace(phase=None, outcome=Outcome.HUNG, reason="(test)", run_dir=str(tmp_path), findings=(),
                           fatal_error="", stderr_tail="", seed=1)
    args = (tmp_path / "repro", Probed(package, "fork_lock", "fork-use"), seen)
    script = write_reproduction(*args) if timeout is None else write_reproduction(*args, timeout=timeout)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIFEGUARD"))}
    env["PYTHONPATH"] = str(build)
    done = []
    for number in range(runs):
        # Output to a file: a hung forked child keeps a pipe open after its parent ended.
        with open(tmp_path / f"stderr-{number}.txt", "w+") as err:
            proc = subprocess.Popen([sys.executable, script], cwd=tmp_path, env=env, stdout=err, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=REPRO_BOUND)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            err.seek(0)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, "", err.read()))
    return done


# A reproduction's forked child gets half of this (the survey's --timeout), and one run at most REPRO_BOUND.
REPRO_TIMEOUT = 4.0
REPRO_BOUND = 60.0


def test_the_reproduction_forks_as_the_probe_does(tmp_path: Path, builds: dict[str, Path]) -> None:
    """A survey's fork-use script waits for the hook's threads to have run and forks FORKS times, as the probe
    does, so it catches the fork_lock deadlock as often as the probe (forking once right after the hook caught it
    in 1 or 2 runs of 5); the fixed build runs to a clean end."""
    fixed, = _reproduce(tmp_path / "fixed", builds["fixed"], None, 1)
    assert fixed.returncode == 0, fixed.stderr
    forks = re.findall(r"fork (\d+) of (\d+), [0-9.]+ s after the hook returned; its threads \[name, state, CPU ns\]: "
                       r"\[\['[^']*', '\w', (\d+)\]\]", fixed.stderr)
    assert [(int(n), int(of)) for n, of, _ in forks] == [(n, FORKS) for n in range(1, FORKS + 1)], fixed.stderr
    assert all(int(cpu) > 0 for _, _, cpu in forks), fixed.stderr  # the hook's thread had run at each fork

    caught = [run for run in _reproduce(tmp_path / "buggy", builds["buggy"], REPRO_TIMEOUT, RUNS)
              if run.returncode != 0 and "did not finish within" in run.stderr]
    assert len(caught) >= CAUGHT_AT_LEAST, caught


FIXTURE_TESTS = """
import pytest

BUILD = {build!r}


def test_nothing_exercised(lifeguard):
    lifeguard.probe("fork_lock", "exit", hook="hooks.py:nothing", paths=[BUILD])


def test_exercised(lifeguard):
    runs = lifeguard.probe("fork_lock", "exit", hook="hooks.py:exercise", paths=[BUILD]).assert_clean()
    assert [(record.exercised, record.calls) for record in runs.exercised] == [(True, 2)]
"""


def test_the_fixture_reports_what_was_exercised_and_fails_a_probe_that_was_not(
        plugin_env: pytest.Pytester, builds: dict[str, Path]) -> None:
    plugin_env.makepyfile(hooks=textwrap.dedent(HOOKS),
                          test_fixture_probe=FIXTURE_TESTS.format(build=str(builds["fixed"])))
    result = plugin_env.runpytest_subprocess("-rA", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert ("exit probe of fork_lock: not exercised: the exit probe used nothing of fork_lock: the hook made 0 calls "
            "of it") in out, out
    assert "lifeguard: exit probe of fork_lock, run 1: 0 call(s) of the module (0 raised)" in out, out
    assert "lifeguard: exit probe of fork_lock, run 1: 2 call(s) of the module (0 raised)" in out, out
