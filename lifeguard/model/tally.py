"""A series summarised run by run: what its summary needs, gathered as its runs finish, so that a session
need not keep its passing runs (a 10,000-run stress kept every RunResult, about 2 KB a run, until the end).

The engine feeds every finished run to its series' ``SeriesTally`` and keeps a run only when it is evidence
(``is_evidence``); the tally itself holds the few runs a summary points at (the first failure, the first
unexpected run, the first run), whatever the engine keeps.
"""

from __future__ import annotations

from lifeguard.model.outcomes import Expectation, Outcome, Verdict
from lifeguard.model.result import RunResult, SeriesSummary
from lifeguard.model.scenario import Scenario
from lifeguard.model.stats import RunningStats


class SeriesTally:
    """One scenario x variant: outcome counts, the verdict so far, statistics, and the runs a summary shows."""

    def __init__(self, scenario: Scenario, variant: str, expectation: Expectation) -> None:
        self.scenario = scenario
        self.variant = variant
        self.expectation = expectation
        self.counts = {o.value: 0 for o in Outcome}
        self.stats = RunningStats()
        self.all_accepted = True  # every run so far is one a series meeting its expectation may have
        self.hit = False  # some run matched the expectation (what a "sometimes:" series needs)
        self.first_run: RunResult | None = None
        self.first_failure: RunResult | None = None  # lowest index that did not pass
        self.first_unaccepted: RunResult | None = None  # lowest index the expectation cannot accept
        self.modes: set[str] = set()
        self.duration = 0.0
        self.threads_at_exit = 0  # runs whose other threads were alive into finalization (run.sink says which)

    @property
    def runs(self) -> int:
        return self.stats.runs

    def accepts(self, result: RunResult) -> bool:
        return self.expectation.accepts(result.outcome, result.phase)

    def is_evidence(self, result: RunResult) -> bool:
        """Is this run worth keeping: it did not pass, or its expectation cannot accept it (a passing run of a
        series expected to crash)? A passing run that was expected is not."""
        return result.outcome is not Outcome.PASSED or not self.accepts(result)

    def add(self, result: RunResult, threads_at_exit: bool = False) -> None:
        """Count a finished run; ``threads_at_exit``: other threads were alive, and free to run, as it began to
        finalize."""
        failed = result.outcome is not Outcome.PASSED
        self.threads_at_exit += threads_at_exit
        self.counts[result.outcome.value] += 1
        self.stats.add(result.index, failed, result.duration, result.finished_at)
        self.hit = self.hit or self.expectation.matches(result.outcome, result.phase)
        self.modes.add(result.mode.value)
        self.duration += result.duration
        self.first_run = _earlier(self.first_run, result)
        if failed:
            self.first_failure = _earlier(self.first_failure, result)
        if not self.accepts(result):
            self.all_accepted = False
            self.first_unaccepted = _earlier(self.first_unaccepted, result)

    def verdict(self) -> Verdict:
        """As Expectation.judge of every run so far: each acceptable, and at least one that hit."""
        return Verdict.EXPECTED if self.runs and self.hit and self.all_accepted else Verdict.UNEXPECTED

    def summary(self) -> SeriesSummary:
        verdict = self.verdict()
        shown = (self.first_unaccepted or self.first_run) if verdict is Verdict.UNEXPECTED else None
        item = self.scenario
        return SeriesSummary(
            scenario=item.name, variant=self.variant, expected=str(self.expectation), runs=self.runs,
            counts={k: v for k, v in self.counts.items() if v}, verdict=verdict, description=item.description,
            where=item.where, first_unexpected=shown, first_failure=self.first_failure,
            stats=self.stats.stats() if self.runs else None, modes=tuple(sorted(self.modes)),
            duration=self.duration, threads_at_exit=self.threads_at_exit,
        )


def _earlier(kept: RunResult | None, result: RunResult) -> RunResult:
    """The run that comes first in its series (runs finish out of order with -j)."""
    return result if kept is None or result.index < kept.index else kept
