"""A series summarised run by run: the same verdict, counts, statistics and shown runs as a summary of every
run kept to the end, whatever order the runs finish in; passing runs that were expected are not evidence."""

from __future__ import annotations

import random

import pytest

from lifeguard.model.outcomes import Expectation, Outcome, Phase, Verdict
from lifeguard.model.result import RunResult
from lifeguard.model.run import StartMode
from lifeguard.model.scenario import Scenario
from lifeguard.model.stats import series_stats
from lifeguard.model.tally import SeriesTally

SCENARIO = Scenario(name="pool", function="pool", path="/s/pool.py", line=3, fixture=None,
                    expect={"buggy": "crashed@exit"}, timeout=10, repeat={"buggy": 5}, description="a pool")
ENDINGS = [(Outcome.PASSED, None), (Outcome.CRASHED, Phase.EXIT), (Outcome.CRASHED, Phase.RUN),
           (Outcome.CORRUPTED, Phase.RUN), (Outcome.HUNG, Phase.EXIT)]


def run(index: int, outcome: Outcome, phase: Phase | None, duration: float) -> RunResult:
    return RunResult(scenario="pool", variant="buggy", index=index, outcome=outcome, phase=phase,
                     expected="crashed@exit", signal=None, exit_code=0, duration=duration, python="3.11.7",
                     run_dir=f"/runs/pool-buggy-{index}", finished_at=float(index + 1),
                     mode=StartMode.FORK_FAST if index % 2 else StartMode.FRESH)


def shown_when_every_run_is_kept(expectation: Expectation, runs: list[RunResult]) -> RunResult | None:
    """What the summary showed when the session kept every run: the first it could not accept, else the first."""
    if expectation.judge([(r.outcome, r.phase) for r in runs]) is Verdict.EXPECTED:
        return None
    return next((r for r in runs if not expectation.accepts(r.outcome, r.phase)), runs[0] if runs else None)


@pytest.mark.parametrize("expected", ["crashed@exit", "passed", "sometimes:corrupted", "crashed"])
def test_a_tally_summarises_as_every_run_kept_would(expected: str) -> None:
    expectation = Expectation.parse(expected)
    rng = random.Random(expected)
    for _ in range(300):
        weights = [rng.random() for _ in ENDINGS]
        runs = [run(i, *rng.choices(ENDINGS, weights)[0], round(rng.uniform(0.01, 2), 3))
                for i in range(rng.randint(1, 12))]
        tally = SeriesTally(SCENARIO, "buggy", expectation)
        for result in rng.sample(runs, len(runs)):  # finished in any order
            tally.add(result)
        summary = tally.summary()
        assert summary.verdict is expectation.judge([(r.outcome, r.phase) for r in runs])
        assert summary.first_unexpected == shown_when_every_run_is_kept(expectation, runs)
        assert summary.first_failure == next((r for r in runs if r.outcome is not Outcome.PASSED), None)
        assert summary.stats == series_stats([r.outcome is not Outcome.PASSED for r in runs],
                                             [r.duration for r in runs], [r.finished_at for r in runs])
        counts: dict[str, int] = {}
        for result in runs:
            counts[result.outcome.value] = counts.get(result.outcome.value, 0) + 1
        assert summary.counts == {o.value: counts[o.value] for o in Outcome if o.value in counts}
        assert summary.runs == len(runs) and summary.duration == pytest.approx(sum(r.duration for r in runs))
        assert summary.modes == tuple(sorted({r.mode.value for r in runs}))
        assert (summary.expected, summary.description, summary.where) == (expected, "a pool", "/s/pool.py:3")


def test_an_empty_series_is_unexpected_and_shows_nothing() -> None:
    summary = SeriesTally(SCENARIO, "buggy", Expectation.parse("passed")).summary()
    assert (summary.verdict, summary.runs, summary.first_unexpected, summary.stats) == (
        Verdict.UNEXPECTED, 0, None, None)


def test_only_runs_that_did_not_pass_or_were_unexpected_are_evidence() -> None:
    clean = SeriesTally(SCENARIO, "fixed", Expectation.parse("passed"))
    assert not clean.is_evidence(run(0, Outcome.PASSED, None, 0.1))
    assert clean.is_evidence(run(1, Outcome.CRASHED, Phase.EXIT, 0.1))
    crashing = SeriesTally(SCENARIO, "buggy", Expectation.parse("crashed@exit"))
    assert crashing.is_evidence(run(0, Outcome.PASSED, None, 0.1))  # the bug did not show: that is evidence
    stochastic = SeriesTally(SCENARIO, "buggy", Expectation.parse("sometimes:corrupted"))
    assert not stochastic.is_evidence(run(0, Outcome.PASSED, None, 0.1))
