"""Expectations: parsed from their text, matched against outcomes and phases, and judged over a series."""

from __future__ import annotations

import pytest

from lifeguard.errors import ScenarioDefinitionError
from lifeguard.model.outcomes import Expectation, Outcome, Phase, Verdict
from lifeguard.model.scenario import resolve_expectation

PASSED, FAILED, CRASHED, HUNG, CORRUPTED, NOT_EXERCISED, ERROR = Outcome
IMPORT, RUN, EXIT, FORK_CHILD = Phase


@pytest.mark.parametrize(("text", "expected"), [
    ("passed", Expectation(PASSED)),
    ("crashed@exit", Expectation(CRASHED, EXIT)),
    ("hung@fork-child", Expectation(HUNG, FORK_CHILD)),
    ("  failed@run ", Expectation(FAILED, RUN)),
    ("sometimes:corrupted", Expectation(CORRUPTED, None, sometimes=True)),
    ("sometimes: crashed@exit", Expectation(CRASHED, EXIT, sometimes=True)),
])
def test_parse(text: str, expected: Expectation) -> None:
    assert Expectation.parse(text) == expected
    assert Expectation.parse(str(expected)) == expected  # str() writes what parse() reads


def test_str_is_the_short_form() -> None:
    assert str(Expectation(CRASHED, EXIT)) == "crashed@exit"
    assert str(Expectation(CORRUPTED, sometimes=True)) == "sometimes:corrupted"
    assert str(Outcome.HUNG) == "hung" and str(Phase.FORK_CHILD) == "fork-child" and str(Verdict.EXPECTED) == "expected"


@pytest.mark.parametrize(("text", "message"), [
    ("crash", "unknown outcome 'crash' (choose from passed, failed, crashed, hung, corrupted)"),
    ("crashed@later", "unknown phase 'later' (choose from import, run, exit, fork-child)"),
    ("", "unknown outcome ''"),
    ("sometimes:passed", "'sometimes:passed' means nothing; expect 'passed'"),
    ("error", "'error' is lifeguard's own failure, not an outcome to expect (choose from passed, failed, crashed, "
              "hung, corrupted)"),
    ("sometimes:error@run", "'error' is lifeguard's own failure"),
    ("not exercised", "'not exercised' is a probe that used nothing of its module, not an outcome to expect"),
])
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        Expectation.parse(text)
    assert str(raised.value).startswith(message)


def test_matches_needs_the_phase_only_when_one_is_given() -> None:
    anywhere = Expectation(CRASHED)
    assert anywhere.matches(CRASHED, EXIT) and anywhere.matches(CRASHED, None)
    at_exit = Expectation(CRASHED, EXIT)
    assert at_exit.matches(CRASHED, EXIT)
    assert not at_exit.matches(CRASHED, RUN) and not at_exit.matches(HUNG, EXIT)


def test_an_error_run_is_never_accepted() -> None:
    """lifeguard's own failure for a run proves nothing about the scenario: no expectation accepts it, so its
    series is unexpected whatever else it holds."""
    for expectation in (Expectation(PASSED), Expectation(CRASHED, EXIT), Expectation(CORRUPTED, sometimes=True)):
        assert not expectation.accepts(ERROR, None) and not expectation.matches(ERROR, None)
        assert expectation.judge([(expectation.outcome, expectation.phase), (ERROR, None)]) is Verdict.UNEXPECTED


def test_judge_every_run_must_match() -> None:
    crash = Expectation(CRASHED, EXIT)
    assert crash.judge([(CRASHED, EXIT)] * 3) is Verdict.EXPECTED
    assert crash.judge([(CRASHED, EXIT), (PASSED, None)]) is Verdict.UNEXPECTED
    assert crash.judge([(CRASHED, EXIT), (CRASHED, RUN)]) is Verdict.UNEXPECTED
    assert crash.judge([]) is Verdict.UNEXPECTED  # no runs prove nothing
    assert Expectation(PASSED).judge([(PASSED, None)] * 2) is Verdict.EXPECTED
    assert Expectation(PASSED).judge([(PASSED, None), (HUNG, RUN)]) is Verdict.UNEXPECTED


def test_judge_sometimes_needs_one_hit_and_otherwise_passes() -> None:
    rare = Expectation.parse("sometimes:corrupted@run")
    assert rare.judge([(PASSED, None), (CORRUPTED, RUN), (PASSED, None)]) is Verdict.EXPECTED
    assert rare.judge([(PASSED, None)] * 5) is Verdict.UNEXPECTED  # never hit
    assert rare.judge([(CORRUPTED, RUN), (CRASHED, RUN)]) is Verdict.UNEXPECTED  # another failure
    assert rare.accepts(PASSED, None) and not Expectation(CORRUPTED, RUN).accepts(PASSED, None)


def test_expectation_by_python_version() -> None:
    spec = {"<3.12": "crashed@exit", ">=3.12": "hung@exit"}
    assert resolve_expectation(spec, (3, 11), "s.py:1") == Expectation(CRASHED, EXIT)
    assert resolve_expectation(spec, (3, 13), "s.py:1") == Expectation(HUNG, EXIT)
    assert resolve_expectation({"3.10": "failed", "*": "passed"}, (3, 10), "s.py:1") == Expectation(FAILED)
    assert resolve_expectation({"3.10": "failed", "*": "passed"}, (3, 11), "s.py:1") == Expectation(PASSED)
    with pytest.raises(ScenarioDefinitionError, match=r"^s.py:1: no expectation covers Python 3.9$"):
        resolve_expectation({">=3.10": "passed"}, (3, 9), "s.py:1")
    with pytest.raises(ScenarioDefinitionError, match=r"^s.py:1: bad Python version key '>=x'"):
        resolve_expectation({">=x": "passed"}, (3, 11), "s.py:1")
    with pytest.raises(ScenarioDefinitionError, match=r"^s.py:1: unknown outcome 'exploded'"):
        resolve_expectation("exploded", (3, 11), "s.py:1")
