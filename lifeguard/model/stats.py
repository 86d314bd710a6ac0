"""Statistics of a series of runs: failure rate with a Wilson interval, runs to first
failure, duration percentiles, gathered run by run (``RunningStats``) so that no run has to be kept
for them. Standard library only (math, array): importing lifeguard stays cheap."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Z_95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(failures: int, runs: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when there are no runs.

    Unlike the normal approximation it stays inside [0, 1] and is meaningful at
    0 failures, which is exactly the case a "fixed" verdict rests on.
    """
    if runs <= 0:
        return (0.0, 1.0)
    n = float(runs)
    p = failures / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = (z / (1 + z2 / n)) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, float(centre - half)), min(1.0, float(centre + half)))


@dataclass(frozen=True)
class SeriesStats:
    runs: int
    failures: int  # runs whose outcome is not "passed"
    rate: float
    rate_low: float
    rate_high: float
    runs_to_first_failure: int | None  # 1-based; None when none failed
    seconds_to_first_failure: float | None
    duration_p50: float
    duration_p90: float
    duration_p99: float
    duration_max: float

    def bound_text(self) -> str:
        """'under lifeguard, 0/500 runs failed: rate < 0.8% at 95%' or 'under lifeguard, 12/50 runs failed: rate
        24% (95% CI 14%-37%)'. Each rate is one of runs under lifeguard, which may change a race's timing: said
        every time (benchmarks/fidelity.py compares it with the program run alone)."""
        if self.runs == 0:
            return "no runs"
        counted = f"under lifeguard, {self.failures}/{self.runs} runs failed"
        if self.failures == 0:
            return f"{counted}: rate < {_pct(self.rate_high)} at 95%"
        if self.failures == self.runs:
            return f"{counted}: rate > {_pct(self.rate_low)} at 95%"
        return f"{counted}: rate {_pct(self.rate)} (95% CI {_pct(self.rate_low)}-{_pct(self.rate_high)})"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "bound": self.bound_text()}


def _pct(value: float) -> str:
    percent = value * 100
    if percent == 0:
        return "0%"
    if percent < 0.1:
        return f"{percent:.3f}%"
    if percent < 10 or 99.5 <= percent < 100:  # never "rate > 100%": 1000/1000 runs bound it at 99.6%
        return f"{percent:.1f}%"
    return f"{percent:.0f}%"


def percentile(values: Sequence[float], percent: float, *, ordered: bool = False) -> float:
    """The ``percent``-th percentile of ``values`` (not empty; ``ordered``: already sorted), interpolated
    linearly between the two nearest ranks: numpy's default (``method="linear"``, Hyndman & Fan type 7),
    computed as numpy does so both give the same float: from the upper rank when the fraction is 1/2 or more."""
    ranked = values if ordered else sorted(values)
    position = (len(ranked) - 1) * (percent / 100)
    below = math.floor(position)
    if below >= len(ranked) - 1:
        return float(ranked[-1])
    low, high = float(ranked[below]), float(ranked[below + 1])
    fraction = position - below
    if fraction >= 0.5:
        return high - (high - low) * (1 - fraction)
    return low + (high - low) * fraction


# Exact percentiles need every duration: a series keeps them as 8-byte floats in an array, all of them up to
# this many runs (800 KB). A longer series keeps a uniform sample of this size (reservoir sampling), so its
# percentiles are estimates from 100,000 runs; its counts, first failure and maximum stay exact.
DURATIONS_KEPT = 100_000


class RunningStats:
    """One series' statistics, fed one finished run at a time in any order (``index`` is the run's place in
    its series): memory stays at DURATIONS_KEPT floats however long the series runs."""

    def __init__(self, kept: int = DURATIONS_KEPT) -> None:
        self.kept = kept
        self.runs = 0
        self.failures = 0
        self.first_failure: tuple[int, float | None] | None = None  # (index, finished_at) of the earliest failure
        self.durations = array("d")
        self.duration_max = 0.0
        self._sampler: Any = None  # a random.Random, made when the series passes ``kept`` runs

    def add(self, index: int, failed: bool, duration: float, finished_at: float | None = None) -> None:
        self.runs += 1
        duration = float(duration)
        self.duration_max = max(self.duration_max, duration)
        if failed:
            self.failures += 1
            if self.first_failure is None or index < self.first_failure[0]:
                self.first_failure = (index, finished_at)
        if len(self.durations) < self.kept:
            self.durations.append(duration)
            return
        if self._sampler is None:
            import random  # only a series longer than ``kept`` runs needs it

            self._sampler = random.Random(self.kept)  # seeded: the same runs give the same estimate
        slot = self._sampler.randrange(self.runs)  # Algorithm R: each run stays with probability kept/runs
        if slot < self.kept:
            self.durations[slot] = duration

    def stats(self) -> SeriesStats:
        runs, failures = self.runs, self.failures
        low, high = wilson_interval(failures, runs)
        times: Sequence[float] = self.durations if runs else [0.0]
        p50, p90, p99 = percentiles(times, (50, 90, 99))
        first = self.first_failure
        return SeriesStats(
            runs=runs, failures=failures, rate=failures / runs if runs else 0.0, rate_low=low, rate_high=high,
            runs_to_first_failure=None if first is None else first[0] + 1,
            seconds_to_first_failure=None if first is None or first[1] is None else round(float(first[1]), 3),
            duration_p50=round(p50, 4), duration_p90=round(p90, 4), duration_p99=round(p99, 4),
            duration_max=round(self.duration_max if runs else 0.0, 4),
        )


def percentiles(values: Sequence[float], percents: Iterable[float]) -> list[float]:
    """``percentile`` of each of ``percents``, sorting ``values`` once."""
    ordered = sorted(values)
    return [percentile(ordered, p, ordered=True) for p in percents]


def series_stats(failed: Sequence[bool], durations: Sequence[float], finished_at: Sequence[float] = ()) -> SeriesStats:
    """Stats of one series; ``failed`` and ``durations`` in run order; ``finished_at``
    the seconds since the start of the session at which each run finished."""
    running = RunningStats()
    for index, (bad, duration) in enumerate(zip(failed, durations, strict=True)):
        running.add(index, bad, duration, finished_at[index] if len(finished_at) > index else None)
    return running.stats()
