"""How a survey reads each test's outcome from a plain pytest session's output, and what it makes a candidate of."""

from __future__ import annotations

from lifeguard.survey import suite_sessions
from lifeguard.survey.suite_sessions import _plain_outcomes
from lifeguard.survey.suite_triage import group_candidates

KILLED = """\
============================= test session starts ==============================
collecting ... collected 4 items

tests/test_a.py::test_x PASSED                                           [ 25%]
tests/test_a.py::test_y[a b] FAILED                                      [ 50%]
tests/test_a.py::test_z SKIPPED (needs a GPU)                            [ 75%]
"""

FINISHED = KILLED + """\
tests/test_a.py::test_w PASSED                                           [100%]
tests/test_a.py::test_w ERROR                                            [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_x
FAILED tests/test_a.py::test_y[a b] - AssertionError: assert 1 == 2
SKIPPED [1] tests/test_a.py:9: needs a GPU
ERROR tests/test_a.py::test_w - RuntimeError: teardown
"""


def test_a_session_killed_at_its_time_limit_keeps_the_tests_it_finished() -> None:
    found = {test: run.outcome for test, run in _plain_outcomes(KILLED).items()}
    assert found == {"tests/test_a.py::test_x": "passed", "tests/test_a.py::test_y[a b]": "failed",
                     "tests/test_a.py::test_z": "skipped"}


def test_a_teardown_error_after_a_pass_is_the_outcome() -> None:
    found = {test: run.outcome for test, run in _plain_outcomes(FINISHED).items()}
    assert found["tests/test_a.py::test_w"] == "error"
    assert found["tests/test_a.py::test_y[a b]"] == "failed"


def test_a_run_lifeguard_could_not_judge_is_never_a_candidate() -> None:
    run = suite_sessions.TestRun  # (a name pytest would collect from this module)
    plain = {"t.py::test_a": run("passed"), "t.py::test_b": run("passed")}
    runs = {"t.py::test_a": run("error", "exit", "its exit status was collected by something else"),
            "t.py::test_b": run("crashed", "exit", "killed by SIGSEGV")}
    (candidate,) = group_candidates("pkg", "1.0", "exit", plain, runs, [])
    assert candidate.tests == ["t.py::test_b"] and candidate.failure == "crashed@exit"


def test_the_table_says_why_tests_of_a_probe_have_no_outcome() -> None:
    from lifeguard.session.suite_survey import SuiteSurvey, suites_table

    lost = "60 test(s) without an outcome: the session was killed at the survey's time limit (12 s)"
    surveyed = SuiteSurvey("pkg", "1.0", chosen=70, collected=90, passed_plainly=68, sessions={
        "exit": {"ran": 68, "applied": 0, "lost": []},
        "fork-rerun": {"ran": 8, "applied": 8, "lost": [lost]}})
    table = suites_table([surveyed], ("exit", "fork-rerun"))
    assert "8 (8)" in table
    assert f"pkg: under fork-rerun, {lost}" in table.splitlines()
