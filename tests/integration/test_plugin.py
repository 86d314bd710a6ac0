"""The pytest plugin, seen from a user's pytest session (pytester): marker, options, fixture, xdist, JUnit.

Every marked test here really runs in a fresh supervised interpreter; crashes
and hangs are real (a SIGSEGV from an atexit callback, a sleep past the deadline).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from lifeguard.pytest_plugin.settings import REPEAT_HELP, REPORT_HELP, TIMEOUT_HELP
from tests.helpers import Pace, load_report
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT, junit_cases, properties

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

# Stands for the deadline of a run that must hang in its body, in the inner test files below: replaced by
# one derived from the measured start-up (tests.helpers.Pace), so the deadline never passes while the child
# is still starting (importing pytest's assertion rewriter alone takes a few tenths of a second).
HANG_DEADLINE = "HANG_DEADLINE"
XDIST_MISSING = "pytest-xdist is not installed: it is optional (pip install 'lifeguard[xdist]'; the test extra has it)"

FRESHNESS_CONFTEST = """
import builtins

# Set in the pytest process only: a forked child would inherit it, a fresh interpreter has not.
builtins.pytest_process_mark = True
"""

CRASH_AT_EXIT = """
    import atexit, os, signal
    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)
"""

BEHAVIOUR = f"""
import builtins
import os

import pytest


@pytest.mark.lifeguard
def test_fresh_interpreter():
    assert os.environ.get("LIFEGUARD_CHILD") == "1"
    assert not hasattr(builtins, "pytest_process_mark")


def test_unmarked_runs_in_process():
    assert os.environ.get("LIFEGUARD_CHILD") is None
    assert builtins.pytest_process_mark


@pytest.mark.lifeguard
def test_crash_at_exit():
{CRASH_AT_EXIT}

@pytest.mark.lifeguard(expect="crashed@exit")
def test_crash_at_exit_expected():
{CRASH_AT_EXIT}

@pytest.mark.lifeguard(expect={{"<3.0": "crashed", "*": "passed"}})
def test_expectation_by_python_version():
    pass


@pytest.mark.lifeguard(repeat=3)
def test_repeat():
    pass


@pytest.mark.lifeguard(timeout={HANG_DEADLINE}, expect="hung@run")
def test_timeout():
    import time
    time.sleep(60)


@pytest.mark.lifeguard
def test_assert_rewritten():
    values = [1, 2]
    assert values == [1, 2, 3]


@pytest.mark.lifeguard
@pytest.mark.parametrize("number", [1, 2])
def test_arguments(number, tmp_path):
    (tmp_path / f"written-by-child-{{number}}.txt").write_text(str(os.getpid()))


class TestInClass:
    @pytest.mark.lifeguard
    def test_method(self):
        assert type(self).__name__ == "TestInClass"


@pytest.mark.lifeguard
def test_skip_in_child():
    pytest.skip("skipped in the child")


@pytest.mark.lifeguard
def test_xfail_in_child():
    pytest.xfail("xfailed in the child")


@pytest.mark.lifeguard
def test_pytest_object_argument(request):
    pass


@pytest.mark.lifeguard
async def test_async():
    pass
"""


def test_marked_tests_run_in_fresh_interpreters(plugin_env: pytest.Pytester, pace: Pace) -> None:
    plugin_env.makeconftest(FRESHNESS_CONFTEST)
    plugin_env.makepyfile(test_behaviour=BEHAVIOUR.replace(HANG_DEADLINE, pace.deadline_text(0.5)))
    result = plugin_env.runpytest("-rA", "--junitxml=junit.xml")
    result.assert_outcomes(passed=9, failed=3, skipped=1, xfailed=1, errors=1)
    out = result.stdout.str()
    cases = junit_cases(plugin_env.path / "junit.xml")

    crash = cases["test_crash_at_exit"]
    assert properties(crash)["outcome"] == "crashed"
    assert properties(crash)["phase"] == "exit"
    assert properties(crash)["signal"] == "SIGSEGV"
    assert "lifeguard: crashed@exit (SIGSEGV): [crash]" in out  # the outcome and the first finding, first
    assert "(expected passed, got 1 crashed in 1 run(s))" in out
    failure = crash.find("failure")
    assert failure is not None and failure.get("message", "").startswith("Failed: lifeguard: crashed@exit (SIGSEGV)")

    assert properties(cases["test_crash_at_exit_expected"])["verdict"] == "expected"
    assert properties(cases["test_repeat"])["runs"] == "3"
    assert properties(cases["test_timeout"])["count.hung"] == "1"
    assert properties(cases["test_timeout"])["phase"] == "run"
    assert "AssertionError: assert [1, 2] == [1, 2, 3]" in out  # rewritten in the child, as pytest would
    basetemp = plugin_env.path.parent / "basetemp"  # where pytester puts the inner session's tmp_path
    assert len(list(basetemp.rglob("written-by-child-*.txt"))) == 2
    assert "SKIPPED [1] test_behaviour.py" in out and "skipped in the child" in out
    assert "xfailed in the child" in out
    assert "argument 'request' (TopRequest) cannot be used in a fresh interpreter" in out
    assert "marker on test_async: the body must be a plain function" in out


# test name -> (marker arguments, the keyword blamed, the rest of the message)
MARKER_ERRORS = {
    "test_timeout_word": ('timeout="soon"', "timeout", "'soon' is not a number of seconds"),
    "test_timeout_zero": ("timeout=0", "timeout", "0 must be a positive number of seconds"),
    "test_timeout_nan": ('timeout=float("nan")', "timeout", "nan must be a positive number of seconds"),
    "test_repeat_zero": ("repeat=0", "repeat", "0 must be at least 1"),
    "test_repeat_fraction": ("repeat=1.5", "repeat", "1.5 is not a whole number"),
    "test_repeat_stray": ('fixture="tiny", variant="fixed", repeat={"buggy": 2}', "repeat",
                          "names variant 'buggy', which does not run"),
    "test_expect_outcome": ('expect="crash"', "expect", "unknown outcome 'crash'"),
    "test_expect_phase": ('expect="crashed@later"', "expect", "unknown phase 'later'"),
    "test_expect_type": ("expect=3", "expect", "3 is not an outcome"),
    "test_expect_missing": ('fixture="tiny", variant="fixed", expect={"buggy": "crashed"}', "expect",
                            "no expectation for variant 'fixed'"),
    "test_variants_need_fixture": ('expect={"buggy": "crashed", "fixed": "passed"}', "variant",
                                   "buggy/fixed variants need fixture="),
    "test_fixture_name": ('fixture="no such"', "fixture", "'no such' is not a fixture name"),
    "test_variant_name": ('fixture="tiny", variant="patched"', "variant", "'patched' is not 'buggy', 'fixed'"),
    "test_variant_alone": ('variant="fixed"', "variant", "a variant needs fixture="),
    "test_unknown_keyword": ("timout=3", "", "unknown keyword 'timout'"),
    "test_positional": ("10", "", "takes keywords only"),
}


def test_every_bad_marker_keyword_is_a_setup_error_naming_it(plugin_env: pytest.Pytester) -> None:
    source = ["import pytest\n"]
    for name, (arguments, _, _) in MARKER_ERRORS.items():
        source.append(f"@pytest.mark.lifeguard({arguments})\ndef {name}():\n    pass\n")
    source.append('@pytest.mark.lifeguard(fixture="absent")\ndef test_absent_fixture():\n    pass\n')
    plugin_env.makepyfile(test_markers="\n".join(source))
    result = plugin_env.runpytest()
    result.assert_outcomes(errors=len(MARKER_ERRORS), failed=1)
    out = result.stdout.str()
    for name, (_, keyword, message) in MARKER_ERRORS.items():
        assert f"ERROR at setup of {name}" in out
        blamed = f"{keyword} from marker on {name}" if keyword else f"marker on {name}"
        assert f"lifeguard: {blamed}: {message}" in out, name
    assert "unknown fixture 'absent'" in out


OPTION_ERRORS = [
    (["--lifeguard-timeout", "abc"], "", "--lifeguard-timeout from command line: 'abc' is not a number of seconds"),
    (["--lifeguard-timeout", "-1"], "", "--lifeguard-timeout from command line: '-1' must be a positive number"),
    (["--lifeguard-timeout", "inf"], "", "--lifeguard-timeout from command line: 'inf' must be a positive number"),
    (["--lifeguard-repeat", "0"], "", "--lifeguard-repeat from command line: '0' must be at least 1"),
    (["--lifeguard-report", "a_file"], "", "--lifeguard-report from command line: 'a_file' exists and is not a folder"),
    ([], "lifeguard_timeout = soon", "lifeguard_timeout from ini file: 'soon' is not a number of seconds"),
    ([], "lifeguard_timeout = nan", "lifeguard_timeout from ini file: 'nan' must be a positive number of seconds"),
    (["--lifeguard-timeout", "nan"], "", "--lifeguard-timeout from command line: 'nan' must be a positive number"),
    ([], "lifeguard_repeat = 2.5", "lifeguard_repeat from ini file: '2.5' is not a whole number"),
    ([], "lifeguard_report = a_file", "lifeguard_report from ini file: 'a_file' exists and is not a folder"),
    (["-o", "lifeguard_repeat=x"], "", "lifeguard_repeat from -o: 'x' is not a whole number"),
]


@pytest.mark.parametrize(("args", "ini", "message"), OPTION_ERRORS)
def test_bad_option_values_are_usage_errors_naming_their_source(plugin_env: pytest.Pytester, args: list[str],
                                                                ini: str, message: str) -> None:
    (plugin_env.path / "a_file").write_text("")
    plugin_env.makeini(f"[pytest]\n{ini}\n")
    plugin_env.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = plugin_env.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"lifeguard: {message}" in result.stderr.str()


def test_a_command_line_value_replaces_a_bad_ini_value(plugin_env: pytest.Pytester) -> None:
    plugin_env.makeini("[pytest]\nlifeguard_timeout = soon\n")
    plugin_env.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    plugin_env.runpytest("--lifeguard-timeout", "5").assert_outcomes(passed=1)


def test_options_and_ini_values_share_one_help_text(plugin_env: pytest.Pytester) -> None:
    out = " ".join(plugin_env.runpytest("--help").stdout.str().split())
    for option, ini, help_text in (("--lifeguard-timeout=SECONDS", "lifeguard_timeout", TIMEOUT_HELP),
                                   ("--lifeguard-repeat=N", "lifeguard_repeat", REPEAT_HELP),
                                   ("--lifeguard-report=DIR", "lifeguard_report", REPORT_HELP)):
        assert f"{option} {help_text}" in out
        assert f"{ini} (string): {help_text}" in out
    markers = " ".join(plugin_env.runpytest("--markers").stdout.str().split())
    assert "@pytest.mark.lifeguard(timeout=30, repeat=1, expect='passed', fixture=None, variant=None):" in markers


# The ini file's deadline is shorter than test_sleeps' sleep: that run hangs however fast the machine is
# (its deadline counts from the child's start, the sleep starts later still).
INI_DEADLINE = 0.2
SLEEP = 0.5
assert INI_DEADLINE < SLEEP

COUNTED = f"""
import time

import pytest


@pytest.mark.lifeguard(repeat=1)
def test_marker_repeat():
    pass


@pytest.mark.lifeguard
def test_session_repeat():
    pass


@pytest.mark.lifeguard(timeout=60)
def test_marker_timeout():
    time.sleep({SLEEP})


@pytest.mark.lifeguard
def test_session_timeout():
    time.sleep({SLEEP})
"""


def test_marker_beats_command_line_beats_ini(plugin_env: pytest.Pytester, pace: Pace) -> None:
    """pytest-timeout's order: what a test's marker says wins, then the command line, then the ini file."""
    plugin_env.makepyfile(test_precedence=COUNTED)
    plugin_env.makeini(f"[pytest]\nlifeguard_repeat = 2\nlifeguard_timeout = {INI_DEADLINE}\n")
    # A deadline every run here fits in, start-up and sleep included.
    roomy = pace.deadline_text(30)

    def run(*args: str) -> dict[str, str]:
        plugin_env.runpytest("--junitxml=junit.xml", *args)
        # No properties: the test's one run passed (properties only where they say something).
        return {name: properties(case).get("runs", "1") + " " + properties(case).get("outcome", "")
                for name, case in junit_cases(plugin_env.path / "junit.xml").items()}

    # The marker's repeat=1 over the ini's 2; the ini's 2 where the marker says nothing.
    assert run("-k", "repeat", "--lifeguard-timeout", roomy) == {"test_marker_repeat": "1 ",
                                                                 "test_session_repeat": "2 "}
    # The marker's repeat=1 over the command line's 3; the command line's 3 over the ini's 2.
    assert run("-k", "repeat", "--lifeguard-repeat", "3", "--lifeguard-timeout", roomy) == {
        "test_marker_repeat": "1 ", "test_session_repeat": "3 "}
    # The marker's 60 s over the ini's 0.2 s; the ini's 0.2 s where the marker says nothing.
    assert run("-k", "timeout", "--lifeguard-repeat", "1") == {"test_marker_timeout": "1 ",
                                                               "test_session_timeout": "1 hung"}
    # The command line's roomy deadline over the ini's 0.2 s.
    assert run("-k", "timeout", "--lifeguard-repeat", "1", "--lifeguard-timeout", roomy) == {
        "test_marker_timeout": "1 ", "test_session_timeout": "1 "}


REPORTED = f"""
import pytest


@pytest.mark.lifeguard
def test_passes():
    pass


@pytest.mark.lifeguard
def test_crashes():
{CRASH_AT_EXIT}"""


def test_report_folder_holds_one_report_of_the_session(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_reported=REPORTED)
    result = plugin_env.runpytest("--lifeguard-report", "out", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=1)
    out = plugin_env.path / "out"
    report = json.loads((out / "report.json").read_text())
    assert {s["scenario"] for s in report["summaries"]} == {"test_reported.py::test_passes",
                                                           "test_reported.py::test_crashes"}
    assert len((out / "results.jsonl").read_text().splitlines()) == 2  # one line a run, both tests
    crashed = next(r for r in report["runs"] if r["outcome"] == "crashed")
    assert crashed["phase"] == "exit"
    run_dir = Path(crashed["run_dir"])
    assert (run_dir / "stderr.txt").exists()
    assert run_dir.is_relative_to(out / "runs" / "test_reported.py" / "test_crashes")  # a readable folder
    passed = next(r for r in report["runs"] if r["outcome"] == "passed")
    assert not Path(passed["run_dir"]).exists()  # passed runs keep nothing
    assert (out / "junit.xml").exists() and (out / "report.html").exists()
    index = (out / "index.txt").read_text()
    assert "FAIL test_reported.py::test_crashes" in index and "runs/test_reported.py/test_crashes" in index
    assert "ok   test_reported.py::test_passes" in index
    assert Path(properties(junit_cases(plugin_env.path / "junit.xml")["test_crashes"])["report"]) == out
    assert f"lifeguard: report of 2 run(s) in {out}" in result.stdout.str()


def test_ini_report_folder_is_relative_to_the_ini_file(plugin_env: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env.makeini("[pytest]\nlifeguard_report = reports\n")
    plugin_env.makepyfile(test_reported=REPORTED)
    elsewhere = plugin_env.mkdir("elsewhere")
    monkeypatch.chdir(elsewhere)
    result = plugin_env.runpytest("-c", str(plugin_env.path / "tox.ini"), str(plugin_env.path), "-k", "passes")
    result.assert_outcomes(passed=1)
    report = json.loads((plugin_env.path / "reports" / "report.json").read_text())
    assert [s["scenario"] for s in report["summaries"]] == ["test_reported.py::test_passes"]
    assert not (elsewhere / "reports").exists()


def test_xdist_carries_evidence_to_the_controller_and_junit(plugin_env: pytest.Pytester) -> None:
    pytest.importorskip("xdist", reason=XDIST_MISSING)
    plugin_env.makepyfile(test_reported=REPORTED)
    result = plugin_env.runpytest_subprocess("-n", "2", "--junitxml=junit.xml", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "[gw" in out  # really ran on workers
    assert "test_reported.py::test_crashes#0: crashed@exit (SIGSEGV)" in out
    assert "Captured lifeguard call" in out
    cases = junit_cases(plugin_env.path / "junit.xml")
    failure = cases["test_crashes"].find("failure")
    assert failure is not None and "crashed@exit (SIGSEGV)" in (failure.text or "")
    assert "--- stacks, culprit first" in (failure.text or "") or "note:" in (failure.text or "")
    assert properties(cases["test_crashes"])["outcome"] == "crashed"
    assert properties(cases["test_passes"]) == {}  # one run that passed: nothing to add to pytest's line


UNMARKED = """
import sys


def test_plain():
    assert "lifeguard.engine" not in sys.modules
"""

MODULES_CONFTEST = """
import json
import sys


def pytest_sessionfinish(session):
    names = sorted(name for name in sys.modules if name.split(".")[0] == "lifeguard")
    with open("lifeguard-modules.json", "w") as f:
        json.dump(names, f)
"""


def test_tests_without_the_marker_pay_nothing(plugin_env: pytest.Pytester) -> None:
    plugin_env.makeconftest(MODULES_CONFTEST)
    plugin_env.makepyfile(test_unmarked=UNMARKED)
    plugin_env.runpytest_subprocess(timeout=INNER_SESSION_TIMEOUT).assert_outcomes(passed=1)
    loaded = json.loads((plugin_env.path / "lifeguard-modules.json").read_text())
    assert "lifeguard.pytest_plugin" in loaded  # the plugin was there...
    idle = {"lifeguard.run.engine", "lifeguard.run.supervise", "lifeguard.pytest_plugin.runner"}
    assert not idle & set(loaded)  # ...idle


SWITCHED_OFF = """
import os

import pytest


@pytest.mark.lifeguard
def test_marked_but_in_process():
    assert os.environ.get("LIFEGUARD_CHILD") is None


def test_fixture(lifeguard):
    pass
"""


def test_p_no_lifeguard_switches_it_off(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_off=SWITCHED_OFF)
    result = plugin_env.runpytest("-p", "no:lifeguard", "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=1, errors=1)
    assert "fixture 'lifeguard' not found" in result.stdout.str()


FIXTURE_USES = """
import pytest


def add(a, b=0):
    print("sum", a + b)
    assert a + b == 3


def test_run_code(lifeguard):
    runs = lifeguard.run_code("print('hello from the child')")
    runs.assert_clean()
    assert len(runs) == 1 and runs.outcome.value == "passed" and runs.phase is None
    assert "hello from the child" in runs.results[0].stdout_tail


def test_crash_outcome_and_finding(lifeguard):
    runs = lifeguard.run_code("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    runs.assert_outcome("crashed", phase="run").assert_outcome("crashed@run").assert_finding("crash")


def test_hang(lifeguard):
    lifeguard.run_code("import time; time.sleep(60)", timeout=HANG_DEADLINE).assert_outcome("hung@run")


def test_script(lifeguard, tmp_path):
    script = tmp_path / "tool.py"
    script.write_text("import sys\\nassert sys.argv[1:] == ['a', 'b'], sys.argv\\n")
    lifeguard.run_script(script, argv=["a", "b"]).assert_clean()
    lifeguard.run_script(script).assert_outcome("failed@run")


def test_function(lifeguard):
    lifeguard.run_function(add, 1, b=2, repeat=2).assert_clean()
    lifeguard.run_function(add, 1).assert_outcome("failed")


def test_clean_failure_shows_evidence(lifeguard):
    lifeguard.run_code("import sys; sys.stderr.write('evidence-of-exit-3\\\\n'); raise SystemExit(3)").assert_clean()


def test_outcome_failure_shows_evidence(lifeguard):
    lifeguard.run_code("print('fine')").assert_outcome("hung")


def test_finding_failure_lists_kinds(lifeguard):
    lifeguard.run_code("import os, signal; os.kill(os.getpid(), signal.SIGABRT)").assert_finding("no-such-kind")


def test_bad_call(lifeguard):
    lifeguard.run_code("pass", timeout=-1)
"""


def test_fixture_runs_code_scripts_and_functions(plugin_env: pytest.Pytester, pace: Pace) -> None:
    plugin_env.makepyfile(test_fixture_uses=FIXTURE_USES.replace(HANG_DEADLINE, pace.deadline_text(0.5)))
    result = plugin_env.runpytest()
    result.assert_outcomes(passed=5, failed=4)
    out = result.stdout.str()
    assert "test_clean_failure_shows_evidence code: 1 run(s): 1 failed@exit; expected every run to pass" in out \
        or "test_clean_failure_shows_evidence code: 1 run(s): 1 failed@run; expected every run to pass" in out
    assert "evidence-of-exit-3" in out
    assert "1 run(s): 1 passed; expected hung" in out
    assert "expected a finding of kind 'no-such-kind' (found: crash)" in out
    assert "timeout of run_code: -1 must be a positive number of seconds" in out


NATIVE_FIXTURE = r"""
#include <Python.h>

static PyObject *fixed(PyObject *self, PyObject *unused) { return PyBool_FromLong(LIFEGUARD_FIXED); }

static PyMethodDef methods[] = {{"fixed", fixed, METH_NOARGS, "fixed() -> bool"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "tiny", "", -1, methods};

PyMODINIT_FUNC PyInit_tiny(void) { return PyModule_Create(&module_def); }
"""

NATIVE_TESTS = """
import pytest


@pytest.mark.lifeguard(fixture="tiny", variant="fixed")
def test_one_variant():
    import tiny
    from lifeguard import child
    assert tiny.fixed() and child.variant() == "fixed"


@pytest.mark.lifeguard(fixture="tiny")
def test_both_variants():
    import tiny
    from lifeguard import child
    assert tiny.fixed() == (child.variant() == "fixed")


@pytest.mark.lifeguard(fixture="tiny", expect={"buggy": "failed@run", "fixed": "passed"})
def test_expectation_per_variant():
    import tiny
    assert tiny.fixed()


@pytest.mark.lifeguard(fixture="tiny", variant=("buggy",), repeat={"buggy": 2})
def test_repeat_per_variant():
    import tiny


@pytest.mark.lifeguard(fixture="tiny")
def test_buggy_variant_fails():
    import tiny
    assert tiny.fixed(), "the buggy build"


def fixed_flag():
    import tiny
    assert tiny.fixed()


def test_fixture_function_on_a_native_fixture(lifeguard):
    lifeguard.run_function(fixed_flag, fixture="tiny", variant="fixed").assert_clean()
    lifeguard.run_function(fixed_flag, fixture="tiny", variant="buggy").assert_outcome("failed@run")
"""


def test_fixture_keyword_builds_each_variant_near_the_test(plugin_env: pytest.Pytester) -> None:
    folder = plugin_env.mkdir("fixtures_native") / "tiny"
    folder.mkdir()
    (folder / "tiny.c").write_text(NATIVE_FIXTURE)
    plugin_env.makepyfile(test_native=textwrap.dedent(NATIVE_TESTS))
    result = plugin_env.runpytest("--junitxml=junit.xml", "--lifeguard-report", "rep")
    result.assert_outcomes(passed=5, failed=1)
    cases = junit_cases(plugin_env.path / "junit.xml")
    assert properties(cases["test_both_variants"]) == {}  # both variants' one run passed
    both = {s["variant"]: s["runs"] for s in load_report(plugin_env.path / "rep")["summaries"]
            if s["scenario"].endswith("test_both_variants")}
    assert both == {"buggy": 1, "fixed": 1}
    per_variant = properties(cases["test_repeat_per_variant"])
    assert sum(int(value) for key, value in per_variant.items() if key.endswith(".runs")) == 2
    out = result.stdout.str()
    assert "lifeguard: failed@run in variant buggy: AssertionError: the buggy build" in out
    assert "AssertionError: the buggy build" in out


SLOW_IMPORT = """
import time

import pytest

time.sleep({import_seconds})  # start-up of every child: before the body, not the test's


@pytest.mark.lifeguard(timeout={deadline})
def test_quick_body():
    pass


@pytest.mark.lifeguard(timeout={deadline})
def test_slow_body():
    time.sleep({body_seconds})
"""


def test_a_marked_tests_deadline_counts_from_its_body(plugin_env: pytest.Pytester, pace: Pace) -> None:
    """A child's start-up (here a test module that takes a while to import) is not the test's: a deadline
    shorter than it still lets a quick body pass, and a slow body is hung in its run phase, not at import."""
    deadline = pace.deadline(1)
    plugin_env.makepyfile(test_slow_import=SLOW_IMPORT.format(import_seconds=2 * deadline, deadline=deadline,
                                                              body_seconds=4 * deadline))
    plugin_env.runpytest("--junitxml=junit.xml").assert_outcomes(passed=1, failed=1)
    cases = junit_cases(plugin_env.path / "junit.xml")
    assert properties(cases["test_quick_body"]) == {}  # its one run passed
    slow = properties(cases["test_slow_body"])
    assert (slow["outcome"], slow["phase"]) == ("hung", "run")
