"""Statistics of a series of runs: failure rate with a Wilson interval, runs to first
failure, duration percentiles. Standard library only (math): importing lifeguard stays cheap."""

from __future__ import annotations

import math
from collections.abc import Sequence
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
        """'0/500 failed: rate < 0.8% at 95%' or '12/50 failed: rate 24% (95% CI 14%-37%)'."""
        if self.runs == 0:
            return "no runs"
        if self.failures == 0:
            return f"0/{self.runs} failed: rate < {_pct(self.rate_high)} at 95%"
        if self.failures == self.runs:
            return f"{self.runs}/{self.runs} failed: rate > {_pct(self.rate_low)} at 95%"
        return (f"{self.failures}/{self.runs} failed: rate {_pct(self.rate)} "
                f"(95% CI {_pct(self.rate_low)}-{_pct(self.rate_high)})")

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "bound": self.bound_text()}


def _pct(value: float) -> str:
    percent = value * 100
    if percent == 0:
        return "0%"
    if percent < 0.1:
        return f"{percent:.3f}%"
    if percent < 10:
        return f"{percent:.1f}%"
    return f"{percent:.0f}%"


def percentile(values: Sequence[float], percent: float) -> float:
    """The ``percent``-th percentile of ``values`` (not empty), interpolated linearly between the two
    nearest ranks: numpy's default (``method="linear"``, Hyndman & Fan type 7), computed as numpy does
    so both give the same float: from the upper rank when the fraction is 1/2 or more."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * (percent / 100)
    below = math.floor(position)
    if below >= len(ordered) - 1:
        return float(ordered[-1])
    low, high = float(ordered[below]), float(ordered[below + 1])
    fraction = position - below
    if fraction >= 0.5:
        return high - (high - low) * (1 - fraction)
    return low + (high - low) * fraction


def series_stats(failed: Sequence[bool], durations: Sequence[float], finished_at: Sequence[float] = ()) -> SeriesStats:
    """Stats of one series; ``failed`` and ``durations`` in run order; ``finished_at``
    the seconds since the start of the session at which each run finished."""
    runs = len(failed)
    failures = sum(1 for f in failed if f)
    low, high = wilson_interval(failures, runs)
    first = next((i for i, f in enumerate(failed) if f), None)
    times = [float(d) for d in durations] if runs else [0.0]
    p50, p90, p99 = (percentile(times, p) for p in (50, 90, 99))
    return SeriesStats(
        runs=runs, failures=failures, rate=failures / runs if runs else 0.0, rate_low=low, rate_high=high,
        runs_to_first_failure=None if first is None else first + 1,
        seconds_to_first_failure=(round(float(finished_at[first]), 3)
                                  if first is not None and len(finished_at) > first else None),
        duration_p50=round(p50, 4), duration_p90=round(p90, 4), duration_p99=round(p99, 4),
        duration_max=round(max(times), 4),
    )
