"""`pytest --lifeguard` in groups, its default mode (lifeguard.pytest_plugin.groups): many tests in one forked
child, pinned to the one test that fails the child's life (pytester, real forks, a real C++ static destructor,
real crashes and hangs): alone and with -n 2; pytest's own words for pytest's own outcomes."""

from __future__ import annotations

import json
import signal

import pytest

from lifeguard.build import build_fixture
from lifeguard.interpreter import resolve
from tests.helpers import ROOT, Pace
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT, junit_cases, properties

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

# Test modules of plain tests around the one that fills the static pool (whose C++ destructor then releases
# Python objects after the interpreter finalized: the onnxruntime incident).
PLAIN_MODULE = """
import pytest


@pytest.mark.parametrize("n", range(12))
def test_plain(n):
    assert n * n >= 0
"""
POOL_MODULE = """
import sys
sys.path.insert(0, {build_dir!r})
import types

import pytest
import static_destructor


@pytest.mark.parametrize("n", range(6))
def test_before(n):
    pass


def test_fills_the_pool():
    def apply(*values):
        return values

    static_destructor.register_function("f", types.SimpleNamespace(apply=apply, backward=apply))
    assert static_destructor.size() == 1


@pytest.mark.parametrize("n", range(6))
def test_after(n):
    pass
"""


@pytest.fixture(scope="module")
def pool_build() -> str:
    """The buggy static_destructor module, compiled for this interpreter (cached by content)."""
    return str(build_fixture("static_destructor", "buggy", resolve(None), near=ROOT).directory)


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["alone", "xdist"])
def test_an_exit_crash_left_by_one_test_of_many_is_pinned_to_that_test(plugin_env: pytest.Pytester, pool_build: str,
                                                                     extra: tuple[str, ...],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # the short summary's lines whole
    if extra:
        pytest.importorskip("xdist", reason="pytest-xdist is not installed")
    plugin_env.makepyfile(test_a_plain=PLAIN_MODULE, test_b_pool=POOL_MODULE.format(build_dir=pool_build),
                          test_c_plain=PLAIN_MODULE)
    plain = plugin_env.runpytest_subprocess("-p", "no:xdist", timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(passed=37)  # green, then its process crashes at exit naming nothing
    assert plain.ret in (-signal.SIGSEGV, -signal.SIGABRT, 134, 139), plain.ret

    guarded = plugin_env.runpytest_subprocess("--lifeguard", "--junitxml=junit.xml", "--lifeguard-report=out",
                                              *extra, timeout=INNER_SESSION_TIMEOUT)
    guarded.assert_outcomes(passed=36, failed=1)
    assert guarded.ret == pytest.ExitCode.TESTS_FAILED
    out = guarded.stdout.str()
    assert "FAILED test_b_pool.py::test_fills_the_pool - Failed: lifeguard: crashed@exit (SIG" in out
    assert "lifeguard_fixture::FunctionPool::~FunctionPool()" in out  # the native frame of the destructor
    assert "replay: " in out and "-m pytest test_b_pool.py::test_fills_the_pool --lifeguard" in out
    cases = junit_cases(plugin_env.path / "junit.xml")
    assert (properties(cases["test_fills_the_pool"])["outcome"], properties(cases["test_fills_the_pool"])["phase"]) \
        == ("crashed", "exit")
    assert not any(properties(case) for name, case in cases.items() if name != "test_fills_the_pool")
    # The report has every test; the failed one's evidence is the run of that test alone.
    report = json.loads((plugin_env.path / "out" / "report.json").read_text())
    failed = [run for run in report["runs"] if run["outcome"] != "passed"]
    assert [run["scenario"] for run in failed] == ["test_b_pool.py::test_fills_the_pool"]
    assert len(report["runs"]) == 37
    passed = [run for run in report["runs"] if run["outcome"] == "passed"]
    assert all(any("whose whole life, exit included, was seen clean" in note for note in run["notes"])
               for run in passed), passed[0]["notes"]


def _with_timeout(plugin_env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, timeout: str,
                  **files: str) -> pytest.RunResult:
    """A --lifeguard session over ``files`` with this --lifeguard-timeout, its short summary's lines whole."""
    monkeypatch.setenv("COLUMNS", "300")
    plugin_env.makepyfile(**files)
    return plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-timeout", timeout, "-rf",
                                           timeout=INNER_SESSION_TIMEOUT)


DYING = """
import ctypes, os, time


def test_1_before():
    pass


def test_2_crashes():
    ctypes.string_at(0)


def test_3_between():
    pass


def test_4_exits_zero():
    os._exit(0)


def test_5_hangs():
    time.sleep(600)


def test_6_after():
    pass
"""


def test_a_crash_an_exit_or_a_hang_in_a_test_fails_it_and_every_other_test_runs(plugin_env: pytest.Pytester,
                                                                               pace: Pace,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ends the group's child in its test: that test fails with lifeguard's evidence (its phase, the
    call), the tests before it run again in a new child (their exit was not seen) and pass, the rest go on; a
    test that ends its process with status 0 never passes; a hang ends at its own test's deadline."""
    timeout = pace.deadline_text(3)
    result = _with_timeout(plugin_env, monkeypatch, timeout, test_dying=DYING)
    result.assert_outcomes(passed=3, failed=3)
    out = result.stdout.str()
    assert "FAILED test_dying.py::test_2_crashes - Failed: lifeguard: crashed@run (SIGSEGV)" in out
    assert "the test ran in a process that ran 1 test(s) before it, as plain pytest would" in out
    assert "FAILED test_dying.py::test_4_exits_zero - Failed: lifeguard: failed@run: exited with code 0" in out
    assert "FAILED test_dying.py::test_5_hangs - Failed: lifeguard: hung@run" in out
    assert f"deadline of {timeout} s passed" in out
    assert "from Python at test_5_hangs (test_dying.py:21)" in out  # the hung test's line, from its stacks
    assert "ERROR" not in out  # each died in its call, and says so


OWN_WORDS = """
import warnings

import pytest


def helper(x):
    return x + 1


def test_bad():
    assert helper(1) == 3, "helper is off"


def test_warns():
    warnings.warn("careful now", UserWarning)


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False


def test_prints_and_fails():
    print("some output")
    assert False
"""


def test_pytests_own_outcomes_read_as_plain_pytest_reports_them(plugin_env: pytest.Pytester) -> None:
    """Failures (source, assertion line, captured output), skips, xfails and warnings: the whole terminal
    report, the summary line and junit.xml's messages are plain pytest's; junit.xml has no lifeguard property."""
    plugin_env.makepyfile(test_own=OWN_WORDS)
    plain = plugin_env.runpytest_subprocess("-rA", "--junitxml=plain.xml", timeout=INNER_SESSION_TIMEOUT)
    guarded = plugin_env.runpytest_subprocess("-rA", "--lifeguard", "--junitxml=guarded.xml",
                                              timeout=INNER_SESSION_TIMEOUT)

    def report(result: pytest.RunResult) -> list[str]:
        lines = result.stdout.lines
        start = next(n for n, line in enumerate(lines) if "FAILURES" in line)
        return [line.rsplit(" in ", 1)[0] if line.startswith("=") and " in " in line else line
                for line in lines[start:] if not line.startswith(("lifeguard:", "- generated xml file"))]

    assert report(guarded) == report(plain)
    plain_cases = junit_cases(plugin_env.path / "plain.xml")
    guarded_cases = junit_cases(plugin_env.path / "guarded.xml")
    for name, case in plain_cases.items():
        for kind in ("failure", "skipped"):
            mine, theirs = guarded_cases[name].find(kind), case.find(kind)
            assert (mine is None) == (theirs is None), name
            if mine is not None and theirs is not None:
                assert mine.get("message") == theirs.get("message"), name
    assert not any(properties(case) for case in guarded_cases.values())


HANGS_AT_EXIT = """
import threading

import pytest

_stop = threading.Event()


@pytest.mark.parametrize("n", range(3))
def test_before(n):
    pass


def test_leaves_a_thread_that_never_ends():
    threading.Thread(target=_stop.wait, name="never-ends").start()  # not a daemon: the exit joins it


@pytest.mark.parametrize("n", range(3))
def test_after(n):
    pass
"""


def test_a_hang_at_exit_is_pinned_to_the_test_that_leaves_it(plugin_env: pytest.Pytester, pace: Pace,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The group's exit hangs (Python joins a thread that never ends): the halves are run again, each exit
    bounded, down to the one test, which fails hung@exit with the finding and the thread's stack."""
    result = _with_timeout(plugin_env, monkeypatch, pace.deadline_text(3), test_exit_hang=HANGS_AT_EXIT)
    result.assert_outcomes(passed=6, failed=1)
    out = result.stdout.str()
    assert "FAILED test_exit_hang.py::test_leaves_a_thread_that_never_ends - Failed: lifeguard: hung@exit" in out
    assert "[exit-waits-for-thread]" in out and "from Python at wait (threading.py:" in out


@pytest.mark.parametrize("mode", ["group", "fork"])
def test_pytest_faulthandler_timeout_does_not_hang_the_forked_exit(plugin_env: pytest.Pytester, pace: Pace,
                                                                   mode: str) -> None:
    """pytest's faulthandler_timeout arms faulthandler's watchdog thread around each test; a child forked while
    it was armed waited for the watchdog's lock at its finalization, for ever (aio-libs' suites set it): every
    test then failed hung@exit."""
    plugin_env.makeini("[pytest]\nfaulthandler_timeout = 300\n")
    plugin_env.makepyfile(test_timed="def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    result = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", mode, "--lifeguard-timeout",
                                             pace.deadline_text(10), timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)
