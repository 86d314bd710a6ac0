"""`pytest --lifeguard` when pytest's own process crashes: a fixture whose setup or teardown segfaults (it runs in
pytest's process; only a test's body is forked). The test it was in gets an error, the session goes on in a new
worker (lifeguard.pytest_plugin.keeper), and junit.xml, lifeguard's report and the exit code say so. Plain pytest
dies with the crash: no summary, no junit.xml."""

from __future__ import annotations

import json
import signal
import xml.etree.ElementTree as ET

import pytest

from lifeguard.capture.native import available_hang_backends
from tests.helpers import pid_alive
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT, junit_cases

pytest_plugins = ["pytester", "tests.integration.pytester_support"]
# A child per test's body, the fixtures in pytest's process: where a fixture's crash is pytest's own.
FORKED = ("--lifeguard", "--lifeguard-mode", "fork")

CRASHING_FIXTURE = """
import ctypes, os
import pytest


@pytest.fixture
def crashes():
    {before}
    yield
    {after}


def test_a_fails_first():
    assert os.getpid() < 0, "an ordinary failure before the crash"


def test_b_crashes(crashes):
    with open("pids", "a") as pids:
        pids.write(f"{{os.getppid()}}\\n")  # the pytest process this body was forked from


def test_c_after():
    with open("pids", "a") as pids:
        pids.write(f"{{os.getppid()}}\\n")
"""
SEGFAULT = "ctypes.string_at(0)"


def test_plain_pytest_dies_with_a_crash_in_teardown(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_crash=CRASHING_FIXTURE.format(before="pass", after=SEGFAULT))
    plain = plugin_env.runpytest_subprocess("--junitxml=junit.xml", timeout=INNER_SESSION_TIMEOUT)
    assert plain.ret == -signal.SIGSEGV, plain.ret
    assert not (plugin_env.path / "junit.xml").exists()  # what --lifeguard must not lose


@pytest.mark.parametrize("phase", ["setup", "teardown"])
def test_a_crash_in_a_fixture_is_that_tests_error_and_the_session_goes_on(plugin_env: pytest.Pytester,
                                                                          phase: str) -> None:
    before, after = (SEGFAULT, "pass") if phase == "setup" else ("pass", SEGFAULT)
    plugin_env.makepyfile(test_crash=CRASHING_FIXTURE.format(before=before, after=after))
    result = plugin_env.runpytest_subprocess(*FORKED, "--junitxml=junit.xml", "--lifeguard-report=report",
                                             timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(failed=1, passed=1 if phase == "setup" else 2, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert f"ERROR at {phase} of test_b_crashes" in out
    assert f"the pytest process died of SIGSEGV during this test's {phase}" in out
    assert "lifeguard: pytest's process died of SIGSEGV in test_crash.py::test_b_crashes" in out
    assert "an ordinary failure before the crash" in out  # the first worker's failure, in the final summary
    if available_hang_backends():  # the crash waited in the worker for its native stack to be read
        assert "Native stack of the crash" in out and "string_at" in out
    cases = junit_cases(plugin_env.path / "junit.xml")
    assert cases["test_b_crashes"].find("error") is not None
    assert cases["test_a_fails_first"].find("failure") is not None and "test_c_after" in cases
    # The report folder holds every guarded test's runs, those of the worker that died included.
    runs = json.loads((plugin_env.path / "report" / "report.json").read_text())["runs"]
    tested = {run["scenario"].rpartition("::")[2] for run in runs}
    assert tested == ({"test_a_fails_first", "test_c_after"} | ({"test_b_crashes"} if phase == "teardown" else set()))
    # The bodies ran in two pytest processes (the worker that died, then its replacement); none is left.
    parents = [int(line) for line in (plugin_env.path / "pids").read_text().split()]
    assert len(set(parents)) == len(parents) == (2 if phase == "teardown" else 1), parents
    assert not any(pid_alive(pid) for pid in parents)


def test_a_crash_under_x_ends_the_session_there(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_crash=CRASHING_FIXTURE.format(before="pass", after=SEGFAULT))
    result = plugin_env.runpytest_subprocess(*FORKED, "--deselect=test_crash.py::test_a_fails_first", "-x",
                                             "--junitxml=junit.xml", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1, errors=1)
    assert "stopping after 1 failures" in result.stdout.str()
    suite = ET.parse(plugin_env.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1"


def test_the_keeper_can_be_switched_off(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_crash=CRASHING_FIXTURE.format(before="pass", after=SEGFAULT))
    result = plugin_env.runpytest_subprocess(*FORKED, "-o", "lifeguard_keeper=false",
                                             timeout=INNER_SESSION_TIMEOUT)
    assert result.ret == -signal.SIGSEGV, result.ret  # pytest's process, as before the keeper
