"""Outcomes, phases and verdicts: the words DESIGN.md defines, as data."""

from __future__ import annotations

import enum
from dataclasses import dataclass

SOMETIMES_PREFIX = "sometimes:"


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"  # non-zero exit or an uncaught exception
    CRASHED = "crashed"  # killed by a signal or a fatal error
    HUNG = "hung"  # the deadline passed
    CORRUPTED = "corrupted"  # the scenario reported broken data
    # A probe whose hook used nothing of its module: no verdict on the module, and never a pass (its
    # process exited non-zero on purpose, after saying why: neither a failure nor a crash of the module).
    NOT_EXERCISED = "not exercised"
    # lifeguard's own fault for this run (an exception while supervising or explaining it): never an
    # expectation, always an unexpected verdict, and the session exits 3.
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Phase(str, enum.Enum):
    IMPORT = "import"  # before the scenario body started
    RUN = "run"  # inside the scenario body
    EXIT = "exit"  # after the body: finalization, atexit, static destructors
    FORK_CHILD = "fork-child"  # in a process the scenario forked

    def __str__(self) -> str:
        return self.value


class Verdict(str, enum.Enum):
    EXPECTED = "expected"
    UNEXPECTED = "unexpected"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Expectation:
    """What a run must end in: an outcome, and optionally the phase it happens in."""

    outcome: Outcome
    phase: Phase | None = None
    # A stochastic bug: each run ends in ``outcome`` or passes, and at least one
    # run of the series must end in ``outcome`` (written "sometimes:corrupted").
    sometimes: bool = False

    @classmethod
    def parse(cls, text: str) -> Expectation:
        """Parse ``"passed"``, ``"crashed@exit"`` or ``"sometimes:corrupted"``."""
        text = text.strip()
        sometimes = text.startswith(SOMETIMES_PREFIX)
        if sometimes:
            text = text[len(SOMETIMES_PREFIX) :]
        outcome_text, _, phase_text = text.strip().partition("@")
        choices = ", ".join(o.value for o in Outcome if o not in (Outcome.ERROR, Outcome.NOT_EXERCISED))
        try:
            outcome = Outcome(outcome_text)
        except ValueError:
            raise ValueError(f"unknown outcome {outcome_text!r} (choose from {choices})") from None
        if outcome is Outcome.ERROR:
            raise ValueError(f"'error' is lifeguard's own failure, not an outcome to expect (choose from {choices})")
        if outcome is Outcome.NOT_EXERCISED:  # a probe's own failure to use its module: it says nothing of it
            raise ValueError(f"'not exercised' is a probe that used nothing of its module, not an outcome to expect "
                             f"(choose from {choices})")
        phase = None
        if phase_text:
            try:
                phase = Phase(phase_text)
            except ValueError:
                choices = ", ".join(p.value for p in Phase)
                raise ValueError(f"unknown phase {phase_text!r} (choose from {choices})") from None
        if sometimes and outcome is Outcome.PASSED:
            raise ValueError("'sometimes:passed' means nothing; expect 'passed'")
        if outcome is Outcome.PASSED and phase is not None:  # a pass is the whole life: it has no phase to end in
            raise ValueError(f"'passed@{phase.value}' means nothing: a passed run has no phase; expect 'passed'")
        return cls(outcome, phase, sometimes)

    def matches(self, outcome: Outcome, phase: Phase | None) -> bool:
        if outcome != self.outcome:
            return False
        return self.phase is None or self.phase == phase

    def __str__(self) -> str:
        text = f"{self.outcome.value}@{self.phase.value}" if self.phase else self.outcome.value
        return SOMETIMES_PREFIX + text if self.sometimes else text

    def accepts(self, outcome: Outcome, phase: Phase | None) -> bool:
        """Can one run end so within a series that meets this expectation?"""
        return self.matches(outcome, phase) or (self.sometimes and outcome is Outcome.PASSED)

    def judge(self, results: list[tuple[Outcome, Phase | None]]) -> Verdict:
        """The verdict of a series of runs of one scenario x variant: every run acceptable,
        and (for "sometimes:") at least one that hit."""
        hit = any(self.matches(o, p) for o, p in results)
        if results and hit and all(self.accepts(o, p) for o, p in results):
            return Verdict.EXPECTED
        return Verdict.UNEXPECTED
