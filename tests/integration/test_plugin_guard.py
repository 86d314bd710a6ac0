"""`pytest --lifeguard` on unmodified test files (pytester): each test's body forked after its fixtures and
supervised, with pytest's conventions (-s, -x, -k, --lf, xdist, pytest-timeout, unittest, doctests).

The crashes are real: a C++ static destructor (the bundled static_destructor fixture, compiled here) that
releases a Python object after Py_Finalize, in a forked child that ends through the interpreter's own exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lifeguard.build import build_fixture
from lifeguard.interpreter import resolve
from tests.helpers import ROOT, Pace, pid_alive, real_python, restore_terminal_sigint, wait_for
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT, junit_cases, properties

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

XDIST_MISSING = "pytest-xdist is not installed: it is optional (pip install 'lifeguard[xdist]'; the test extra has it)"
PYTEST_TIMEOUT_MISSING = "pytest-timeout is not installed (the test extra has it)"

# An unmodified test of a package whose C++ static pool releases Python callables in exit(): plain pytest
# passes it (and then its own process dies at exit, after "1 passed"); under --lifeguard the test fails.
POOL_TESTS = """
import sys
sys.path.insert(0, {build_dir!r})
import types

import static_destructor


def test_registers_a_function():
    def apply(*values):
        return values

    static_destructor.register_function("f", types.SimpleNamespace(apply=apply, backward=apply))
    del apply
    assert static_destructor.size() == 1


def test_plain_arithmetic():
    assert 1 + 1 == 2
"""


@pytest.fixture(scope="module")
def pool_build() -> str:
    """The buggy static_destructor module, compiled for this interpreter (cached by content)."""
    built = build_fixture("static_destructor", "buggy", resolve(None), near=ROOT)
    return str(built.directory)


def test_a_crash_at_exit_fails_the_test_only_under_lifeguard(plugin_env: pytest.Pytester, pool_build: str) -> None:
    plugin_env.makepyfile(test_pool=POOL_TESTS.format(build_dir=pool_build))
    plain = plugin_env.runpytest_subprocess(timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(passed=2)  # plain pytest: green, although its process then crashes at exit
    assert plain.ret in (-signal.SIGSEGV, -signal.SIGABRT, 134, 139), plain.ret

    guarded = plugin_env.runpytest_subprocess("--lifeguard", "--junitxml=junit.xml", timeout=INNER_SESSION_TIMEOUT)
    guarded.assert_outcomes(passed=1, failed=1)
    assert guarded.ret == 1  # the pytest process itself no longer crashes: the pool was filled in the child
    out = guarded.stdout.str()
    assert "lifeguard: crashed@exit (SIG" in out
    assert "[static-destructor-after-finalize]" in out
    assert "lifeguard_fixture::FunctionPool::~FunctionPool()" in out  # the native frame of the destructor
    case = junit_cases(plugin_env.path / "junit.xml")["test_registers_a_function"]
    assert (properties(case)["outcome"], properties(case)["phase"]) == ("crashed", "exit")
    assert properties(case)["findings"].startswith("static-destructor-after-finalize")


ORDINARY_FAILURE = """
def helper(x):
    return x + 1


def test_ok():
    assert helper(1) == 2


def test_bad():
    value = helper(1)
    assert value == 3, "helper is off"
"""


def _failure_block(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if "_ test_bad _" in line)
    end = next(n for n, line in enumerate(lines) if "generated xml file" in line or "short test summary" in line)
    return lines[start:end]


def test_an_ordinary_failure_reads_as_plain_pytest_reports_it(plugin_env: pytest.Pytester) -> None:
    """A failing assert and nothing of lifeguard's to add: the failure, the short summary and JUnit's message
    in pytest's own words, not "Failed: lifeguard: failed@run: ...", and no extra section."""
    plugin_env.makepyfile(test_ordinary=ORDINARY_FAILURE)
    plain = plugin_env.runpytest_subprocess("-rf", "--junitxml=plain.xml", timeout=INNER_SESSION_TIMEOUT)
    guarded = plugin_env.runpytest_subprocess("-rf", "--lifeguard", "--junitxml=guarded.xml",
                                              timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(passed=1, failed=1)
    guarded.assert_outcomes(passed=1, failed=1)
    assert _failure_block(guarded.stdout.str()) == _failure_block(plain.stdout.str())
    summary = "FAILED test_ordinary.py::test_bad - AssertionError: helper is off"
    assert summary in plain.stdout.str() and summary in guarded.stdout.str()
    assert "Captured lifeguard" not in guarded.stdout.str()
    messages = [junit_cases(plugin_env.path / name)["test_bad"].find("failure").get("message")
                for name in ("plain.xml", "guarded.xml")]
    assert messages[0] == messages[1] == "AssertionError: helper is off\nassert 2 == 3"


SUBTESTS = """
import unittest


class Cases(unittest.TestCase):
    def test_many(self):
        for i in range(4):
            with self.subTest(i=i):
                self.assertLess(i, 3)

    def test_fine(self):
        for i in range(3):
            with self.subTest(i=i):
                pass


def test_fixture_subtests(subtests):
    for i in range(3):
        with subtests.test(msg="each", i=i):
            assert i != 2
"""


def _last_line(result: pytest.RunResult) -> str:
    """pytest's summary line, without its duration."""
    return result.stdout.lines[-1].rsplit(" in ", 1)[0]


@pytest.mark.skipif(int(pytest.__version__.split(".")[0]) < 9, reason="subtests are pytest's own from pytest 9")
def test_subtests_are_counted_and_fail_as_in_plain_pytest(plugin_env: pytest.Pytester) -> None:
    """A forked body's subtests (unittest's subTest, pytest's subtests fixture) reach pytest's process: the
    same summary, short test summary and exit code as plain pytest, and no failed subtest lost to a green
    run; with -n 2 too."""
    plugin_env.makepyfile(test_subs=SUBTESTS)
    for extra in (("-p", "no:xdist"), ("-n", "2")):
        # each against plain pytest with the same options: with xdist, pytest 9.1+ shows a subtest's parameters
        # as the text of their text (i='3'), lifeguard or not
        plain = plugin_env.runpytest_subprocess("-rf", *extra, timeout=INNER_SESSION_TIMEOUT)
        assert plain.ret == 1 and sum(line.startswith("SUBFAILED") for line in plain.stdout.lines) == 2
        guarded = plugin_env.runpytest_subprocess("-rf", "--lifeguard", *extra, timeout=INNER_SESSION_TIMEOUT)
        assert guarded.ret == 1, guarded.stdout.str()
        assert _last_line(guarded) == _last_line(plain), (extra, guarded.stdout.str())
        for line in plain.stdout.lines:
            if line.startswith(("SUBFAILED", "FAILED")):
                assert line in guarded.stdout.lines, (extra, line, guarded.stdout.str())


PATCHED_FORK = """
import os

import pytest


@pytest.fixture(autouse=True)
def no_forking(monkeypatch):
    def refuse():
        raise AssertionError("this code must not fork")

    monkeypatch.setattr(os, "fork", refuse)


def test_the_code_under_test_does_not_fork():
    assert os.getpid() > 0


def test_a_fork_is_refused():
    with pytest.raises(AssertionError, match="must not fork"):
        os.fork()
"""


def test_a_fixture_that_patches_os_fork_is_no_failure(plugin_env: pytest.Pytester) -> None:
    """lifeguard forks each test through the real fork, not the name a fixture may have replaced."""
    plugin_env.makepyfile(test_patched=PATCHED_FORK)
    plain = plugin_env.runpytest_subprocess(timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(passed=2)
    guarded = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    guarded.assert_outcomes(passed=2)


OPT_OUT = """
import os

import pytest

PYTEST_PID = os.getpid()  # the module is imported by pytest itself, before any fork


def test_forked():
    assert os.getpid() != PYTEST_PID


@pytest.mark.lifeguard(False)
def test_opted_out():
    assert os.getpid() == PYTEST_PID


@pytest.mark.lifeguard(expect="crashed@exit")
def test_marker_keeps_its_settings():
    import atexit, signal
    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)
"""


def test_opt_out_and_markers_keep_their_own_settings(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_opt_out=OPT_OUT)
    result = plugin_env.runpytest("--lifeguard", "-v")
    result.assert_outcomes(passed=3)
    assert "every test guarded (mode group)" in result.stdout.str()
    plugin_env.makeini("[pytest]\nlifeguard = true\nlifeguard_mode = fork\n")  # the ini twins
    from_ini = plugin_env.runpytest("-v")
    from_ini.assert_outcomes(passed=3)
    assert "every test guarded (mode fork)" in from_ini.stdout.str()
    # Without the plugin nothing is forked (in a subprocess: the marked test's atexit would kill this one).
    plain = plugin_env.runpytest_subprocess("-p", "no:lifeguard", "-k", "forked or opted",
                                            timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(passed=1, failed=1)


ATEXIT_TESTS = """
import atexit
import ctypes
import os
from pathlib import Path

LOG = Path({log!r})
PYTEST_PID = os.getpid()


def log(who):
    with LOG.open("a") as f:
        f.write(f"{{who}} {{os.getpid()}}\\n")


log("imported")


@atexit.register  # at import, in the pytest process: the module's own exit work, for every process running it
def close_module():
    log("module")
    if os.environ.get("CRASH_AT_EXIT") and os.getpid() != PYTEST_PID:
        ctypes.string_at(0)  # a native crash inside the atexit callback


def test_one():
    pass


def test_two():
    pass
"""

# A plugin of the harness: its atexit work is the pytest session's, not a test's.
HARNESS_PLUGIN = """
import atexit
import os


def pytest_sessionstart(session):
    atexit.register(lambda: open({log!r}, "a").write(f"plugin {{os.getpid()}}\\n"))
"""


def test_a_forked_test_runs_the_test_modules_atexit_callbacks_not_the_harnesses(
        plugin_env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = plugin_env.path / "atexit.log"
    plugin_env.makepyfile(test_atexit=ATEXIT_TESTS.format(log=str(log)),
                          harness_plugin=HARNESS_PLUGIN.format(log=str(log)))
    # A child per test (fork mode), so that each test's exit is a process's of its own.
    result = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", "fork", "--lifeguard-report", "passed",
                                             "-p", "harness_plugin", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)
    # lifeguard's own last callback, registered in the child, is kept: it says when finalization begins.
    passed = [json.loads(line) for line in (plugin_env.path / "passed" / "results.jsonl").read_text().splitlines()]
    assert len(passed) == 2
    for run in passed:
        assert "atexit-done" in {event["event"] for event in run["events"]}, run["events"]
    lines = [line.split() for line in log.read_text().splitlines()]
    pytest_pid = next(pid for who, pid in lines if who == "imported")
    children = {pid for who, pid in lines if who == "module"} - {pytest_pid}
    assert len(children) == 2, lines  # the module's callback ran in each forked test, as in a process of its own
    # The plugin's callback (registered after lifeguard's snapshot of the harness) ran once, in pytest's process.
    assert [pid for who, pid in lines if who == "plugin"] == [pytest_pid], lines

    # A crash in the module's callback is inside the atexit phase: lifeguard's own last callback (atexit-done)
    # had not run yet, so the evidence never says "every atexit callback had run".
    monkeypatch.setenv("CRASH_AT_EXIT", "1")
    crashed = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", "fork", "--lifeguard-report", "out",
                                              "-p", "harness_plugin", timeout=INNER_SESSION_TIMEOUT)
    crashed.assert_outcomes(failed=2)
    runs = [json.loads(line) for line in (plugin_env.path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(run["outcome"], run["phase"]) for run in runs] == [("crashed", "exit")] * 2
    for run in runs:
        assert "atexit-done" not in {event["event"] for event in run["events"]}, run["events"]
        assert not any("every atexit callback had run" in finding["summary"] for finding in run["findings"])


FIXTURES = """
import os
from pathlib import Path

import pytest

COUNTER = Path({counter!r})
STATE = []


@pytest.fixture(scope="session")
def server_address():
    COUNTER.write_text(COUNTER.read_text() + "setup\\n")
    yield "127.0.0.1:0"
    COUNTER.write_text(COUNTER.read_text() + "teardown\\n")


def test_first(server_address, tmp_path):
    (tmp_path / "written").write_text("by the child")
    STATE.append(1)
    assert server_address == "127.0.0.1:0"


def test_second(server_address, request):
    assert STATE == []  # what test_first changed in memory was its child's
    assert request.node.name == "test_second"  # pytest's own objects work in the child


def test_module_state_is_the_collected_one():
    assert STATE == []
"""


def test_session_fixtures_are_set_up_once_here_and_used_by_every_child(plugin_env: pytest.Pytester) -> None:
    counter = plugin_env.path / "counter.txt"
    counter.write_text("")
    plugin_env.makepyfile(test_fixtures=FIXTURES.format(counter=str(counter)))
    result = plugin_env.runpytest("--lifeguard", "--lifeguard-mode", "fork")  # a child per test's body
    result.assert_outcomes(passed=3)
    assert counter.read_text() == "setup\nteardown\n"  # once, in pytest's process, as plain pytest does


# A suite whose tests hold many files open: the descriptors lifeguard opens next (the forked test's pidfd,
# its pipes) are numbered above 1023, which select() refuses.
MANY_FILES = """
import os
import resource

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < 1400:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1400, hard), hard))
HELD = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]


def test_passes():
    assert HELD[-1] > 1024


def test_fails():
    assert 1 + 1 == 3
"""


def test_a_suite_holding_many_files_open_is_guarded_as_any_other(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_many_files=MANY_FILES)
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "assert (1 + 1) == 3" in out  # the test's own failure, not lifeguard's
    assert "ValueError" not in out


OUTPUT = """
import sys


def test_talks():
    print("streamed-from-the-child")
    sys.stderr.write("stderr-of-the-child\\n")


def test_fails_and_talks():
    print("captured-from-the-child")
    assert False
"""


def test_output_is_captured_as_pytest_does_and_streamed_with_s(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_output=OUTPUT)
    captured = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    captured.assert_outcomes(passed=1, failed=1)
    out = captured.stdout.str()
    assert "streamed-from-the-child" not in out  # a passing test's output stays captured
    assert "Captured stdout call" in out and "captured-from-the-child" in out
    streamed = plugin_env.runpytest_subprocess("--lifeguard", "-s", "-k", "test_talks", timeout=INNER_SESSION_TIMEOUT)
    streamed.assert_outcomes(passed=1)
    assert "streamed-from-the-child" in streamed.stdout.str()
    assert "stderr-of-the-child" in streamed.stderr.str()


STDIN = """
import os
import sys


def test_reads_stdin():
    assert sys.stdin.read() == ""


def test_stdin_is_nothing():
    assert os.path.samestat(os.fstat(0), os.stat(os.devnull))
"""


def test_a_test_reading_stdin_fails_as_in_plain_pytest_and_never_reads_the_terminal(
        plugin_env: pytest.Pytester) -> None:
    """Under capture, pytest fails a test that reads stdin; a forked test too. The process's stdin is nothing,
    with -s as well (never pytest's terminal)."""
    plugin_env.makepyfile(test_stdin=STDIN)
    plain = plugin_env.runpytest_subprocess("-p", "no:lifeguard", "-k", "reads", timeout=INNER_SESSION_TIMEOUT)
    plain.assert_outcomes(failed=1)
    guarded = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    guarded.assert_outcomes(failed=1, passed=1)
    assert "reading from stdin while output is captured" in guarded.stdout.str()
    streamed = plugin_env.runpytest_subprocess("--lifeguard", "-s", timeout=INNER_SESSION_TIMEOUT)
    streamed.assert_outcomes(passed=2)


SELECTION = """
def test_a_fails():
    assert False


def test_b_passes():
    pass


def test_c_fails_too():
    assert False
"""


def test_x_k_and_lf_select_as_usual(plugin_env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env.makepyfile(test_selection=SELECTION)
    plugin_env.runpytest("--lifeguard", "-x").assert_outcomes(failed=1)
    plugin_env.runpytest("--lifeguard", "-k", "passes").assert_outcomes(passed=1)
    # --lf needs pytest's cache, which the inner sessions here switch off.
    monkeypatch.setenv("PYTEST_ADDOPTS", os.environ["PYTEST_ADDOPTS"].replace("-p no:cacheprovider", ""))
    plugin_env.runpytest("--lifeguard").assert_outcomes(passed=1, failed=2)
    plugin_env.runpytest("--lifeguard", "--lf").assert_outcomes(failed=2)


UNITTEST_AND_DOCTEST = '''
import unittest


def double(value):
    """
    >>> double(2)
    4
    >>> double(3)
    7
    """
    return value * 2


class TestDouble(unittest.TestCase):
    def test_right(self):
        self.assertEqual(double(1), 2)

    def test_wrong(self):
        self.assertEqual(double(1), 3)
'''


def test_unittest_cases_and_doctests_are_guarded_too(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_kinds=UNITTEST_AND_DOCTEST)
    result = plugin_env.runpytest("--lifeguard", "--doctest-modules", "--lifeguard-report", "out")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "AssertionError: 2 != 3" in out  # unittest's own failure text, from the child
    assert "Expected:\n    7\nGot:\n    6" in out  # the doctest's
    report = json.loads((plugin_env.path / "out" / "report.json").read_text())
    modes = {run["scenario"].rsplit("::", 1)[-1]: run["mode"] for run in report["runs"]}
    assert modes == {"test_right": "pytest-fork", "test_wrong": "pytest-fork", "test_kinds.double": "pytest-fork"}


def test_xdist_workers_fork_their_own_tests(plugin_env: pytest.Pytester, pool_build: str) -> None:
    pytest.importorskip("xdist", reason=XDIST_MISSING)
    plugin_env.makepyfile(test_pool=POOL_TESTS.format(build_dir=pool_build), test_selection=SELECTION)
    result = plugin_env.runpytest_subprocess("-n", "2", "--lifeguard", "--lifeguard-report", "out",
                                             timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert "[gw" in out and "lifeguard: crashed@exit (SIG" in out
    out_dir = plugin_env.path / "out"
    report = json.loads((out_dir / "report.json").read_text())  # one report: the controller merged the workers'
    assert {run["mode"] for run in report["runs"]} == {"pytest-fork"} and len(report["runs"]) == 5
    assert len(report["summaries"]) == 5
    crashed = next(run for run in report["runs"] if run["outcome"] == "crashed")
    assert Path(crashed["run_dir"]).is_relative_to(out_dir / "workers")  # evidence in its worker's folder
    assert (Path(crashed["run_dir"]) / "stderr.txt").exists()
    assert "FAIL test_pool.py::test_registers_a_function" in (out_dir / "index.txt").read_text()


SLEEPER = """
import os
import time
from pathlib import Path


def test_sleeps():
    # Written whole, then renamed: the test reads the file as soon as it exists (an empty read failed a CI run).
    staged = Path({pid_file!r} + ".part")
    staged.write_text(str(os.getpid()))
    staged.rename({pid_file!r})
    time.sleep(600)
"""


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_pytest_timeout_hands_its_timeout_to_lifeguard(plugin_env: pytest.Pytester, pace: Pace, method: str) -> None:
    """pytest-timeout's timer is not armed for a guarded test: its timeout becomes the lifeguard deadline, the
    evidence is lifeguard's, and the child is never left behind (it used to be, with the thread method)."""
    pytest.importorskip("pytest_timeout", reason=PYTEST_TIMEOUT_MISSING)
    pid_file = plugin_env.path / "child.pid"
    plugin_env.makepyfile(test_sleeper=SLEEPER.format(pid_file=str(pid_file)))
    deadline = pace.deadline_text(2)
    started = time.monotonic()
    result = plugin_env.runpytest_subprocess("--lifeguard", "-p", "timeout", f"--timeout={deadline}",
                                             f"--timeout-method={method}", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "lifeguard: hung@run" in out and f"deadline of {deadline} s passed" in out
    assert "Timeout" not in out.replace("timeout", "")  # no word of pytest-timeout's own
    assert time.monotonic() - started < INNER_SESSION_TIMEOUT
    child = int(pid_file.read_text())
    wait_for(lambda: not pid_alive(child), f"the test's child {child} to be gone", timeout=pace.deadline(10))


CAPTURE_FIXTURES = """
import os


def test_capsys_sees_the_body_print(capsys):
    print("to capsys")
    assert capsys.readouterr().out == "to capsys\\n"


def test_capfd_sees_the_body_print(capfd):
    print("to capfd")
    assert capfd.readouterr().out == "to capfd\\n"


def test_native_output_is_kept():
    os.write(1, b"written to descriptor 1\\n")
    assert False
"""


def test_pytest_capture_fixtures_work_in_the_child(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_capture=CAPTURE_FIXTURES)
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2, failed=1)
    assert "written to descriptor 1" in result.stdout.str()  # a descriptor write: the run's, shown with it
    sys_capture = plugin_env.runpytest_subprocess("--lifeguard", "--capture=sys", "-k", "native",
                                                  timeout=INNER_SESSION_TIMEOUT)
    sys_capture.assert_outcomes(failed=1)
    assert "written to descriptor 1" in sys_capture.stdout.str()


def _start_pytest(folder: Path, *args: str) -> subprocess.Popen[str]:
    """pytest in a session of its own (a test signals it), SIGINT delivered as a terminal's Ctrl-C is."""
    return subprocess.Popen([real_python(), "-m", "pytest", *args], cwd=folder, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=restore_terminal_sigint)


def _proc_state(pid: int) -> str:
    try:
        return " ".join(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:4])  # state ppid pgrp sid
    except OSError:
        return "gone"


def _watchdogs() -> list[str]:
    """The lifeguard watchdogs of this machine: pid and state (a test's diagnosis only)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"watchdog" in (entry / "cmdline").read_bytes():
                found.append(f"{entry.name} {_proc_state(int(entry.name))}")
        except OSError:
            continue
    return found


def _sleep_line() -> int:
    """The line of SLEEPER's test that a Ctrl-C interrupts (makepyfile strips the source)."""
    return SLEEPER.strip().splitlines().index("    time.sleep(600)") + 1


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_stopped_pytest_leaves_no_forked_test_behind(plugin_env: pytest.Pytester, pace: Pace,
                                                        how: signal.Signals) -> None:
    pid_file = plugin_env.path / "child.pid"
    plugin_env.makepyfile(test_sleeper=SLEEPER.format(pid_file=str(pid_file)))
    proc = _start_pytest(plugin_env.path, "--lifeguard", "--lifeguard-report", "out")
    try:
        wait_for(pid_file.exists, "the forked test to start", timeout=INNER_SESSION_TIMEOUT)
        child = int(pid_file.read_text())
        proc.send_signal(how)
        try:
            out, _ = proc.communicate(timeout=INNER_SESSION_TIMEOUT)
        except subprocess.TimeoutExpired:  # its output pipe still open: say who holds it, for the next reader
            pytest.fail(f"pytest ({how.name}, exit {proc.poll()}) still has a reader of its output after "
                        f"{INNER_SESSION_TIMEOUT:g} s; the forked test {child}: {_proc_state(child)}; "
                        f"watchdogs: {_watchdogs()}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # Not alive: gone, or a zombie of this process (the in-process sessions above made it a subreaper, so
    # the killed test's remains come here).
    wait_for(lambda: not pid_alive(child), f"the forked test {child} to be gone", timeout=pace.deadline(10))
    if how == signal.SIGINT:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
        # pytest names the line the forked test was at, not lifeguard's wait for it.
        assert f"test_sleeper.py:{_sleep_line()}: KeyboardInterrupt" in out, out
        report = json.loads((plugin_env.path / "out" / "report.json").read_text())
        assert report["interrupted"] is True  # an interrupted session is never "all as expected"


# Counts the threads of pytest's process at each fork (Python 3.12 and later warn of a fork of a
# multi-threaded process: a DeprecationWarning in every test's report, a failure under -W error).
FORK_THREADS = """
import os
import threading


def count_threads():  # at every fork of pytest's process, however it is called
    with open({counts!r}, "a") as f:
        f.write(f"{{threading.active_count()}}\\n")


os.register_at_fork(before=count_threads)
"""


def test_pytest_s_process_forks_each_test_with_no_thread_of_lifeguard_s_running(plugin_env: pytest.Pytester) -> None:
    counts = plugin_env.path / "threads.txt"
    plugin_env.makeconftest(FORK_THREADS.format(counts=str(counts)))
    plugin_env.makepyfile(test_two="def test_one():\n    print('out')\n\n\ndef test_two():\n    pass\n")
    result = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", "fork", "-W",
                                             "error::DeprecationWarning", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)
    # The keeper's fork of its worker, then one a test; the relays' pumps start after the fork.
    assert counts.read_text().split() == ["1", "1", "1"]


# The supervisor descheduled just after the fork (as on a loaded machine), before it has told its watchdog of
# the run, while the forked test already runs.
LATE_SUPERVISOR = """
import time

from lifeguard.run import containment

told = containment.GuardedSubreaper.started


def late(self, root):
    time.sleep(600)
    told(self, root)


containment.GuardedSubreaper.started = late
"""


def test_a_supervisor_killed_before_it_registered_the_run_leaves_no_forked_test_behind(
        plugin_env: pytest.Pytester, pace: Pace) -> None:
    pid_file = plugin_env.path / "child.pid"
    plugin_env.makeconftest(LATE_SUPERVISOR)
    plugin_env.makepyfile(test_sleeper=SLEEPER.format(pid_file=str(pid_file)))
    proc = _start_pytest(plugin_env.path, "--lifeguard")
    try:
        wait_for(pid_file.exists, "the forked test to start", timeout=INNER_SESSION_TIMEOUT)
        child = int(pid_file.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=INNER_SESSION_TIMEOUT)
        # The watchdog saw its pipe end only after the child had registered itself there.
        wait_for(lambda: not pid_alive(child), f"the forked test {child} to be gone", timeout=pace.deadline(10))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if pid_file.exists() and pid_alive(left := int(pid_file.read_text())):
            os.kill(left, signal.SIGKILL)  # left behind (the failure this test is about): it holds the output
        proc.communicate(timeout=INNER_SESSION_TIMEOUT)


# Ctrl-C landing in pytest's process just after a fork, before supervision has taken the child in (pytest
# descheduled there on a loaded machine while the test already runs): played by raising KeyboardInterrupt
# where the supervisor records the run, once the forked test has said it runs.
INTERRUPTED_AT_START = """
import os
import time

from lifeguard.run import containment

recorded = containment.GuardedSubreaper.started


def interrupted(self, root):
    recorded(self, root)
    deadline = time.monotonic() + 60
    while not os.path.exists({pid_file!r}) and time.monotonic() < deadline:
        time.sleep(0.01)
    raise KeyboardInterrupt


containment.GuardedSubreaper.started = interrupted
"""


def test_ctrl_c_between_the_fork_and_its_supervision_leaves_no_forked_test_behind(
        plugin_env: pytest.Pytester, pace: Pace) -> None:
    pid_file = plugin_env.path / "child.pid"
    plugin_env.makeconftest(INTERRUPTED_AT_START.format(pid_file=str(pid_file)))
    plugin_env.makepyfile(test_sleeper=SLEEPER.format(pid_file=str(pid_file)))
    proc = _start_pytest(plugin_env.path, "--lifeguard")
    try:
        out, _ = proc.communicate(timeout=INNER_SESSION_TIMEOUT)  # ends: the forked test no longer holds its output
        assert proc.returncode == pytest.ExitCode.INTERRUPTED
        child = int(pid_file.read_text())
        wait_for(lambda: not pid_alive(child), f"the forked test {child} to be gone", timeout=pace.deadline(10))
        # Supervision had not begun: pytest still names the test's line, not lifeguard's own.
        assert f"test_sleeper.py:{_sleep_line()}: KeyboardInterrupt" in out, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if pid_file.exists() and pid_alive(left := int(pid_file.read_text())):
            os.kill(left, signal.SIGKILL)  # left behind (the failure this test is about): it holds the output
        proc.communicate(timeout=INNER_SESSION_TIMEOUT)


MODES = """
import threading

import pytest


@pytest.fixture(scope="session", autouse=True)
def server_thread():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="fixture-server", daemon=True)
    thread.start()
    yield
    stop.set()


def test_plain_data(tmp_path):
    pass


def test_needs_request(request):
    pass
"""


def test_modes_decide_fork_or_fresh_and_fresh_refuses_what_it_cannot_run(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_modes=MODES)
    # auto, with a thread of a session fixture running: fresh where the arguments can be sent, else forked
    # with a note saying so.
    auto = plugin_env.runpytest("--lifeguard", "--lifeguard-mode", "auto", "--lifeguard-report", "auto")
    auto.assert_outcomes(passed=2)
    runs = {run["scenario"].rpartition("::")[2]: run
            for run in json.loads((plugin_env.path / "auto" / "report.json").read_text())["runs"]}
    assert runs["test_plain_data"]["mode"] == "fresh"
    assert runs["test_needs_request"]["mode"] == "pytest-fork"
    assert any("fixture-server" in note for note in runs["test_needs_request"]["notes"])
    # fresh, asked for: a test whose arguments cannot be sent is refused, named with its argument.
    fresh = plugin_env.runpytest("--lifeguard", "--lifeguard-mode", "fresh")
    fresh.assert_outcomes(passed=1, failed=1)
    assert "argument 'request' (TopRequest) cannot be used in a fresh interpreter" in fresh.stdout.str()
    # fork, asked for: both forked.
    plugin_env.runpytest("--lifeguard", "--lifeguard-mode", "fork").assert_outcomes(passed=2)
