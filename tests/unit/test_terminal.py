"""The terminal sink's choices: colour (--color, PY_COLORS, NO_COLOR, FORCE_COLOR, TERM=dumb), the unexpected
count, "1 run"."""

from __future__ import annotations

import io

from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult
from lifeguard.report.terminal import _unexpected, plural, use_color


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_follows_the_flag_the_terminal_and_no_color() -> None:
    assert use_color("auto", Tty(), {"TERM": "xterm"}) is True
    assert use_color("auto", Tty(), {"TERM": "xterm", "NO_COLOR": ""}) is True  # an empty NO_COLOR does not count
    assert use_color("auto", Tty(), {"TERM": "xterm", "NO_COLOR": "1"}) is False
    assert use_color("auto", Tty(), {"TERM": "dumb"}) is False
    assert use_color("auto", io.StringIO(), {}) is False  # a pipe or a CI log
    assert use_color("yes", io.StringIO(), {"NO_COLOR": "1"}) is True
    assert use_color("no", Tty(), {}) is False


def test_colour_follows_the_environment_as_pytest_does() -> None:
    assert use_color("auto", io.StringIO(), {"FORCE_COLOR": "1"}) is True  # a CI log that renders colour
    assert use_color("auto", io.StringIO(), {"FORCE_COLOR": ""}) is False
    assert use_color("auto", io.StringIO(), {"FORCE_COLOR": "1", "NO_COLOR": "1"}) is False
    assert use_color("auto", io.StringIO(), {"PY_COLORS": "1", "NO_COLOR": "1"}) is True
    assert use_color("auto", Tty(), {"TERM": "xterm", "PY_COLORS": "0", "FORCE_COLOR": "1"}) is False


def run(outcome: Outcome, phase: Phase | None, expected: str) -> RunResult:
    return RunResult(scenario="s", variant="buggy", index=0, outcome=outcome, phase=phase, expected=expected,
                     signal=None, exit_code=0, duration=0.1, python="3.11.7", run_dir="/runs/s")


def test_an_expected_failure_is_not_counted_unexpected() -> None:
    assert not _unexpected(run(Outcome.CRASHED, Phase.EXIT, "crashed@exit"))
    assert not _unexpected(run(Outcome.PASSED, None, "sometimes:corrupted"))
    assert _unexpected(run(Outcome.CRASHED, Phase.RUN, "crashed@exit"))
    assert _unexpected(run(Outcome.HUNG, Phase.RUN, "passed"))


def test_one_run_is_singular() -> None:
    assert plural(1) == "1 run" and plural(2) == "2 runs" and plural(0) == "0 runs"
