"""Test-suite probes on a library's own suite: tests/integration/fixtures_native/suite_bugs, buggy and fixed.

The library has one lifetime bug per probe, each in an object its own tests make with arguments (see its
header); every test passes in a plain pytest run of either build. Under ``pytest --lifeguard --lifeguard-probe
P`` the buggy build fails exactly the tests whose objects reach P's bug, with the probe named, and the fixed
build passes; ``lifeguard survey --tests`` makes candidates of them, each with a reproduction that reproduces
alone, without lifeguard, every time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from lifeguard.build import build_fixture
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED
from lifeguard.interpreter import resolve
from tests.helpers import FREE_THREADED, Pace, load_report, real_python, run_cli

SUITE = Path(__file__).parent / "fixtures_native" / "suite_bugs" / "suite"
TESTS = "test_suite_bugs.py::"
# Per probe: the tests the buggy build fails, with outcome@phase. A hang waits for the test's deadline.
BUGGY: dict[str, dict[str, str]] = {
    "fork-finalize": {"test_stream_checksum": "hung@fork-child"},
    "fork-rerun": {"test_square_all": "hung@fork-child"},
    "gc-thread": {"test_context_counts_submissions": "hung@run", "test_graph_degrees": "crashed@run",
                  "test_graph_copy_is_independent": "crashed@run"},
    "gc-cycle": {"test_graph_degrees": "crashed@run", "test_graph_copy_is_independent": "crashed@run"},
}
if FREE_THREADED:
    # A free-threaded build frees an object whose references its creating thread holds on that thread (biased
    # reference counting: the collector's last decref queues it to its owner), so a Context is released by its
    # owner and never waits; a Graph, freed in the collection itself, still crashes.
    del BUGGY["gc-thread"]["test_context_counts_submissions"]
DEADLINE_AT_LEAST = 6.0  # each test's: its run plus its probe's (a second run of it, a fork, a collection)


@pytest.fixture(scope="module")
def builds() -> dict[str, Path]:
    near = Path(__file__).parent
    return {variant: build_fixture("suite_bugs", variant, resolve(), near=near).directory
            for variant in ("buggy", "fixed")}


def _suite(tmp_path: Path, build: Path, *options: str, timeout: float) -> tuple[subprocess.CompletedProcess[str],
                                                                                 dict[str, dict[str, Any]]]:
    """The suite under pytest with ``options``, in a copy of its folder; each test's run in lifeguard's report."""
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite, dirs_exist_ok=True)
    report = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(build)}
    argv = [real_python(), "-m", "pytest", "-q", "-p", "no:randomly", *options]
    if "--lifeguard" in options:
        argv += ["--lifeguard-timeout", f"{timeout:g}", "--lifeguard-report", str(report)]
    proc = subprocess.run(argv, cwd=suite, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=timeout * 8 + 120)
    runs = {run["scenario"].removeprefix(TESTS): run for run in load_report(report)["runs"]} \
        if (report / "report.json").exists() else {}
    return proc, runs


@pytest.mark.parametrize("variant", ["buggy", "fixed"])
def test_every_test_passes_plainly(tmp_path: Path, builds: dict[str, Path], variant: str) -> None:
    proc, _ = _suite(tmp_path, builds[variant], timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "16 passed, 1 skipped" in proc.stdout, proc.stdout


@pytest.mark.parametrize("probe", sorted(BUGGY))
def test_each_probe_fails_the_tests_that_reach_its_bug(tmp_path: Path, builds: dict[str, Path], pace: Pace,
                                                       probe: str) -> None:
    timeout = pace.deadline(DEADLINE_AT_LEAST)
    proc, runs = _suite(tmp_path / "buggy", builds["buggy"], "--lifeguard", "--lifeguard-probe", probe,
                        timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    failed = {test: f"{run['outcome']}@{run['phase']}" for test, run in runs.items() if run["outcome"] != "passed"}
    assert failed == BUGGY[probe], output
    for test in failed:
        assert any(note.startswith(f"{probe} probe failed: the test passed") for note in runs[test]["notes"]), \
            runs[test]["notes"]
        assert f"FAILED {TESTS}{test}" in proc.stdout, proc.stdout
    applied = [test for test, run in runs.items() if any(n.startswith(f"{probe} probe: ") for n in run["notes"])]
    assert len(applied) >= 3, runs  # the probe did something after the other tests too, and says what
    proc, runs = _suite(tmp_path / "fixed", builds["fixed"], "--lifeguard", "--lifeguard-probe", probe,
                        timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {run["outcome"] for run in runs.values()} == {"passed"}, proc.stdout


def test_a_probe_needs_group_mode(tmp_path: Path, builds: dict[str, Path]) -> None:
    proc, _ = _suite(tmp_path, builds["fixed"], "--lifeguard", "--lifeguard-mode", "fork", "--lifeguard-probe",
                     "gc-cycle", timeout=30)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--lifeguard-probe gc-cycle needs --lifeguard in group mode" in proc.stderr


def _as_distribution(tmp_path: Path, build: Path) -> Path:
    """The built extension in a folder of its own with the metadata of an installed distribution, as the
    survey finds packages."""
    site = tmp_path / "site"
    site.mkdir(parents=True)
    module = next(build.glob("suite_bugs*.so"))
    shutil.copy2(module, site / module.name)
    info = site / "suite_bugs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: suite_bugs\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"{module.name},,\nsuite_bugs-1.0.dist-info/METADATA,,\n")
    return site


def test_survey_of_its_tests_finds_each_bug_with_a_reproduction(tmp_path: Path, builds: dict[str, Path],
                                                                pace: Pace) -> None:
    timeout = pace.deadline(DEADLINE_AT_LEAST)
    probes = ("fork-rerun", "gc-cycle")
    site = _as_distribution(tmp_path / "buggy", builds["buggy"])
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)  # the survey runs the suite where it is: nothing is written in the fixture
    report = tmp_path / "survey"
    args = ["survey", "--tests", "suite_bugs", "--tests-from", str(suite), "--timeout", f"{timeout:g}",
            "--report", str(report), *(f"--probe={probe}" for probe in ("exit", *probes))]
    proc = run_cli(*args, env={"PYTHONPATH": str(site)}, timeout=timeout * 12 + 240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_UNEXPECTED, output
    surveyed = json.loads((report / "suites.json").read_text())["packages"][0]
    assert surveyed["problem"] == "" and surveyed["collected"] == 17 and surveyed["passed_plainly"] == 16, surveyed
    assert surveyed["sessions"]["exit"]["ran"] == 16, surveyed["sessions"]
    found = {(c["probe"], c["failure"]): c for c in surveyed["candidates"]}
    assert set(found) == {("fork-rerun", "hung@fork-child"), ("gc-cycle", "crashed@run")}, found
    assert found[("fork-rerun", "hung@fork-child")]["tests"] == [f"{TESTS}test_square_all"]
    assert sorted(found[("gc-cycle", "crashed@run")]["tests"]) == [f"{TESTS}test_graph_copy_is_independent",
                                                                   f"{TESTS}test_graph_degrees"]
    for candidate in found.values():
        assert candidate["verdict"] == "candidate"
        assert candidate["reproduced"] == [3, 3], candidate
        script = Path(candidate["reproduction"])
        text = script.read_text()
        assert "import lifeguard" not in text and "from lifeguard" not in text, text  # plain Python and pytest
    assert "reproduced 3 of 3 runs alone" in proc.stdout, output
    assert sorted(p.name for p in suite.iterdir()) == sorted(p.name for p in SUITE.iterdir())  # nothing written
    page = (report / "suites.html").read_text()
    assert "2 candidate(s)" in page and "fork-rerun probe, hung@fork-child" in page, page
    assert "reproduced 3 of 3 runs alone" in page and f"{TESTS}test_square_all" in page, page

    site = _as_distribution(tmp_path / "fixed", builds["fixed"])
    proc = run_cli(*[a if a != str(report) else str(tmp_path / "fixed-survey") for a in args],
                   env={"PYTHONPATH": str(site)}, timeout=timeout * 12 + 240)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "suite_bugs 1.0  17/17  16" in proc.stdout, proc.stdout


@pytest.mark.parametrize(("args", "said"), [
    (["survey", "msgpack", "--tests-from", "."], "--tests-from and --install-test-deps go with --tests"),
    (["survey", "msgpack", "--probe", "fork-rerun"], "--probe fork-rerun: choose from exit, fork-use"),
    (["survey", "--tests", "msgpack", "--probe", "fork-use"], "--probe fork-use: with --tests choose from exit, "
                                                               "fork-finalize, fork-rerun, gc-thread, gc-cycle"),
    (["survey", "--tests", "msgpack", "pytest", "--tests-from", "."], "--tests-from DIR holds the tests of one"),
])
def test_survey_tests_usage_errors(tmp_path: Path, args: list[str], said: str) -> None:
    proc = run_cli(*args, "--report", str(tmp_path / "report"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr, proc.stderr


def _probed(folder: Path, probe: str, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest --lifeguard --lifeguard-probe PROBE ARGS in ``folder``, bounded."""
    return subprocess.run([real_python(), "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--lifeguard", "--lifeguard-probe", probe, *args], cwd=folder, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)


SHARED = '''
import os

MARKER = os.environ["CYCLE_MARKER"]


class Thing:
    def __del__(self):
        if hasattr(self, "_lifeguard_cycle"):  # collected as part of the cycle itself
            open(MARKER, "a").write("collected in its cycle\\n")


CACHE = Thing()


def test_uses_the_cache():
    thing = CACHE
    assert thing is CACHE


def test_the_cache_is_untouched():
    assert not hasattr(CACHE, "_lifeguard_cycle")


def test_makes_its_own():
    thing = Thing()
    assert thing is not CACHE
'''


@pytest.mark.parametrize("probe", ["gc-cycle", "gc-thread"])
def test_only_what_the_test_alone_holds_joins_the_cycle(tmp_path: Path, probe: str) -> None:
    (tmp_path / "test_shared.py").write_text(SHARED)
    marker = tmp_path / "marker.txt"
    env = {**os.environ, "CYCLE_MARKER": str(marker)}
    proc = _probed(tmp_path, probe, "test_shared.py", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout, proc.stdout
    assert marker.read_text() == "collected in its cycle\n"  # the fresh one, once; never the cached one


def test_survey_of_tests_in_an_environment_without_pytest_says_so(tmp_path: Path, builds: dict[str, Path]) -> None:
    subprocess.run([real_python(), "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    site = _as_distribution(tmp_path, builds["fixed"])
    proc = run_cli("survey", "--tests", "suite_bugs", "--tests-from", str(SUITE), "--python",
                   str(tmp_path / "venv" / "bin" / "python"), "--report", str(tmp_path / "report"),
                   env={"PYTHONPATH": str(site)}, timeout=240)
    assert proc.returncode == EXIT_UNEXPECTED, proc.stdout + proc.stderr
    assert "suite_bugs: not surveyed: pytest cannot be imported in" in proc.stdout, proc.stdout
    assert "--install-test-deps installs it" in proc.stdout, proc.stdout


RERUN = '''
import io
import os
import signal

import pytest

SEEN = []


@pytest.mark.parametrize("stream", [io.BytesIO(b"data")])  # made once, at collection: read to its end once
def test_reads_its_stream(stream):
    assert stream.read() == b"data"


def test_stays_in_its_process():  # as a library that caches its owner's pid fails after a fork
    SEEN.append(os.getpid())
    assert SEEN[0] == os.getpid()


def test_says_why_it_dies():  # as numba's OpenMP layer ends a forked child that uses it
    SEEN.append(os.getpid())
    if SEEN[0] != os.getpid():
        os.write(2, b"Terminating: fork() called from a process already using this library\\n")
        os.kill(os.getpid(), signal.SIGTERM)


def test_reads_its_output(capsys):
    print("hello")
    assert capsys.readouterr().out == "hello\\n"
'''


def test_fork_rerun_tells_a_test_that_cannot_run_twice_from_a_fork(tmp_path: Path) -> None:
    (tmp_path / "test_rerun.py").write_text(RERUN)
    report = tmp_path / "report"
    proc = _probed(tmp_path, "fork-rerun", "--lifeguard-report", str(report), "test_rerun.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    runs = {run["scenario"].removeprefix("test_rerun.py::"): run for run in load_report(report)["runs"]}
    stream = runs["test_reads_its_stream[stream0]"]
    assert stream["outcome"] == "passed", stream
    assert any("fork-rerun probe not applied: run again in this process, without a fork, the test fails too"
               in note for note in stream["notes"]), stream["notes"]
    process = runs["test_stays_in_its_process"]
    assert (process["outcome"], process["phase"]) == ("failed", "fork-child"), process
    assert any(note.startswith("fork-rerun probe failed") for note in process["notes"]), process["notes"]
    dies = runs["test_says_why_it_dies"]
    assert (dies["outcome"], dies["phase"]) == ("crashed", "fork-child"), dies
    assert "Terminating: fork() called from a process already using this library" in dies["stderr_tail"], dies
    output = runs["test_reads_its_output"]  # capsys still captures in the forked child
    assert output["outcome"] == "passed" and any(
        note.startswith("fork-rerun probe: forked; the child ran the test again") for note in output["notes"]), output


EARLIER = '''
import atexit
import os
import subprocess
import sys

STARTED = []  # the pid that started the "pool": a library's process-wide state


def _shutdown():  # as libuv's destructor joins its threadpool's threads, in any process
    if STARTED and STARTED[0] != os.getpid():
        os.write(2, b"joining the threads of another process\\n")
        os.abort()


atexit.register(_shutdown)


def test_starts_the_pool():
    STARTED.append(os.getpid())
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # a test with processes of its own: no fork probe


def test_after_it():
    numbers = [1, 2, 3]
    assert sum(numbers) == 6
'''


def _only_candidate(tmp_path: Path, builds: dict[str, Path], name: str, text: str, probe: str) -> dict[str, Any]:
    """The one candidate of a survey, under ``probe``, of a suite of one file (``name``: ``text``)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / name).write_text(text)
    site = _as_distribution(tmp_path, builds["fixed"])
    report = tmp_path / "report"
    proc = run_cli("survey", "--tests", "suite_bugs", "--tests-from", str(suite), "--probe", probe,
                   "--report", str(report), env={"PYTHONPATH": str(site)}, timeout=300)
    assert proc.returncode == EXIT_UNEXPECTED, proc.stdout + proc.stderr
    (candidate,) = json.loads((report / "suites.json").read_text())["packages"][0]["candidates"]
    return cast("dict[str, Any]", candidate)


def test_a_reproduction_runs_the_tests_before_when_the_test_alone_does_not(tmp_path: Path,
                                                                          builds: dict[str, Path]) -> None:
    candidate = _only_candidate(tmp_path, builds, "test_earlier.py", EARLIER, "fork-rerun")
    assert candidate["tests"] == ["test_earlier.py::test_after_it"], candidate
    assert candidate["reproduced"] == [3, 3], candidate
    script = Path(candidate["reproduction"])
    assert script.name.endswith("-after-1.py"), script  # the test alone reproduced in none of its runs
    ran = subprocess.run([real_python(), str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ran.returncode != 0 and "fork-rerun: the forked child ended with -6" in ran.stdout, ran.stdout + ran.stderr


UNITTEST_CASE = '''
import os
import unittest


class Owned:
    def __del__(self):
        if hasattr(self, "_lifeguard_cycle"):  # collected in its own cycle: the probe reached it
            os._exit(7)


class TestOwned(unittest.TestCase):
    def test_makes_one(self):
        owned = Owned()
        self.assertIsNotNone(owned)
'''


def test_the_probes_reach_what_a_unittest_method_made(tmp_path: Path) -> None:
    (tmp_path / "test_case.py").write_text(UNITTEST_CASE)
    proc = _probed(tmp_path, "gc-cycle", "test_case.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gc-cycle probe failed: the test passed" in proc.stdout, proc.stdout
    assert "exited with code 7" in proc.stdout or "exit code 7" in proc.stdout, proc.stdout


def test_a_reproduction_of_a_unittest_method_drops_what_it_made(tmp_path: Path, builds: dict[str, Path]) -> None:
    # The script keeps no reference of its own: the object dies in the probe's collection, as it did in the survey.
    candidate = _only_candidate(tmp_path, builds, "test_case.py", UNITTEST_CASE, "gc-cycle")
    assert candidate["tests"] == ["test_case.py::TestOwned::test_makes_one"], candidate
    assert candidate["reproduced"] == [3, 3], candidate
    ran = subprocess.run([real_python(), candidate["reproduction"]], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert ran.returncode == 7, ran.stdout + ran.stderr
    assert "test_makes_one passed; it made: owned" in ran.stdout, ran.stdout


OUTLIVES = '''
import atexit
import os
import weakref

ALIVE = weakref.WeakSet()


def _check():  # as HDF5's C atexit closes a file that writes through a Python object, after finalization
    if ALIVE:
        os.write(2, b"a test's object outlived the test into the interpreter's exit\\n")
        os._exit(3)


atexit.register(_check)


class Resource:
    pass


def test_makes_a_resource():
    resource = Resource()
    ALIVE.add(resource)
'''


def test_fork_rerun_keeps_nothing_the_second_run_made(tmp_path: Path) -> None:
    (tmp_path / "test_outlives.py").write_text(OUTLIVES)
    proc = _probed(tmp_path, "fork-rerun", "test_outlives.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout


PATCHED_CLOSE = '''
import os

_close = os.close
CLOSED = set()


def _cooperative_close(fd):  # as gevent's patched os.close once its hub runs: a number it closed is refused
    if fd in CLOSED:
        raise OSError(9, "closed before")
    CLOSED.add(fd)
    _close(fd)


def _loop_waitpid(pid, options):  # as gevent's: the news of a child comes through its event loop, or never
    raise ChildProcessError(10, "no news from the event loop")


def test_opens_and_closes():
    os.close = _cooperative_close  # for the rest of the process, as a hub started by a test stays
    os.waitpid = _loop_waitpid
    # The lowest numbers, closed here: any descriptor opened after this test has one of them.
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]
    for fd in opened:
        os.close(fd)
    assert len(CLOSED) == 40
'''


@pytest.mark.parametrize("probe", ["fork-rerun", "fork-finalize"])
def test_a_library_that_patched_os_does_not_fail_the_probes(tmp_path: Path, probe: str) -> None:
    (tmp_path / "test_patched.py").write_text(PATCHED_CLOSE)
    proc = _probed(tmp_path, probe, "test_patched.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout
