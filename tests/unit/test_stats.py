"""Series statistics: the Wilson interval, percentiles as numpy computes them, first failures, the bound line."""

from __future__ import annotations

import random

import pytest

from lifeguard.model.stats import RunningStats, SeriesStats, percentile, series_stats, wilson_interval


def test_wilson_interval_values() -> None:
    low, high = wilson_interval(0, 500)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.00762, abs=1e-4)
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    stats = series_stats([False, False, True, False], [0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0])
    assert stats.runs_to_first_failure == 3 and stats.seconds_to_first_failure == 3.0
    assert stats.bound_text().startswith("under lifeguard, 1/4 runs failed: rate 25%")


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no runs: nothing is known
    low, high = wilson_interval(10, 10)
    assert high == pytest.approx(1.0, abs=1e-12) and low == pytest.approx(0.7225, abs=1e-4)
    # Exact values, as the numpy version of this code computed them (its sqrt is IEEE's, as math's is).
    assert wilson_interval(2, 5) == (0.11762077423264783, 0.769275718723987)
    assert wilson_interval(0, 10)[1] == 0.2775327998628892
    # Symmetric: k failures of n and k passes of n mirror each other around 1/2.
    low, high = wilson_interval(3, 20)
    mirror_low, mirror_high = wilson_interval(17, 20)
    assert low == pytest.approx(1 - mirror_high, abs=1e-12) and high == pytest.approx(1 - mirror_low, abs=1e-12)


# (values, percent, what numpy.percentile(values, percent) returns, exactly)
PERCENTILES = [
    ([3.0, 1.0, 2.0, 10.0], 50, 2.5),
    ([3.0, 1.0, 2.0, 10.0], 90, 7.900000000000001),
    ([3.0, 1.0, 2.0, 10.0], 99, 9.79),
    ([0.1, 0.2, 0.3], 50, 0.2),
    ([0.1, 0.2, 0.3], 90, 0.28),
    ([0.1, 0.2, 0.3], 99, 0.298),
    ([0.5], 99, 0.5),
    ([4.0, 2.0], 0, 2.0),
    ([4.0, 2.0], 100, 4.0),
    # A fraction of 1/2 or more is taken from the upper rank: low + (high - low) * t would give 0.8221999999999998.
    ([0.42, 0.53, 0.57, 0.83], 99, 0.8221999999999999),
]


@pytest.mark.parametrize(("values", "percent", "expected"), PERCENTILES)
def test_percentile_is_numpys_linear_method(values: list[float], percent: float, expected: float) -> None:
    assert percentile(values, percent) == expected


def test_percentile_matches_numpy_bit_for_bit() -> None:
    """Where numpy is installed (it is no dependency any more), compare on many random series."""
    numpy = pytest.importorskip("numpy", reason="numpy is not installed: the cross-check needs it")
    rng = random.Random(20240607)
    for _ in range(2000):
        values = [rng.expovariate(4.0) for _ in range(rng.randint(1, 40))]
        for percent in (50, 90, 99, rng.uniform(0, 100)):
            assert percentile(values, percent) == float(numpy.percentile(values, percent)), (values, percent)


def test_series_stats_of_a_mixed_series() -> None:
    stats = series_stats([False, True, False, False, True], [0.5, 0.1, 0.3, 0.2, 0.4], [1, 2, 3, 4, 5])
    assert stats == SeriesStats(runs=5, failures=2, rate=0.4, rate_low=0.11762077423264783,
                                rate_high=0.769275718723987, runs_to_first_failure=2, seconds_to_first_failure=2.0,
                                duration_p50=0.3, duration_p90=0.46, duration_p99=0.496, duration_max=0.5)
    assert stats.bound_text() == "under lifeguard, 2/5 runs failed: rate 40% (95% CI 12%-77%)"


def test_series_stats_of_clean_failed_and_empty_series() -> None:
    clean = series_stats([False] * 10, [0.05 * i + 0.01 for i in range(10)])
    assert (clean.duration_p50, clean.duration_p90, clean.duration_p99, clean.duration_max) == (
        0.235, 0.415, 0.4555, 0.46)
    assert clean.runs_to_first_failure is None and clean.seconds_to_first_failure is None
    assert clean.bound_text() == "under lifeguard, 0/10 runs failed: rate < 28% at 95%"
    assert series_stats([False] * 500, [0.1] * 500).bound_text() == (
        "under lifeguard, 0/500 runs failed: rate < 0.8% at 95%")
    assert series_stats([True] * 3, [1.0] * 3).bound_text() == "under lifeguard, 3/3 runs failed: rate > 44% at 95%"
    # A failure whose finish time is unknown has no seconds to first failure.
    assert series_stats([True], [1.0]).seconds_to_first_failure is None
    empty = series_stats([], [])
    assert empty.runs == 0 and empty.rate == 0.0 and empty.duration_max == 0.0
    assert empty.bound_text() == "no runs"


def test_rates_below_a_tenth_of_a_percent_keep_their_digits() -> None:
    assert series_stats([False] * 5000, [0.1] * 5000).bound_text() == (
        "under lifeguard, 0/5000 runs failed: rate < 0.077% at 95%")


def test_a_bound_near_100_percent_is_never_rounded_up_to_it() -> None:
    assert series_stats([True] * 1000, [0.1] * 1000).bound_text() == (
        "under lifeguard, 1000/1000 runs failed: rate > 99.6% at 95%")
    assert series_stats([True] * 10, [0.1] * 10).bound_text() == "under lifeguard, 10/10 runs failed: rate > 72% at 95%"


def test_to_dict_carries_every_field_and_the_bound() -> None:
    stats = series_stats([False, True], [0.25, 0.75], [0.5, 1.5])
    data = stats.to_dict()
    assert data["bound"] == stats.bound_text()
    assert {k: v for k, v in data.items() if k != "bound"} == stats.__dict__
    assert data["duration_p50"] == 0.5 and data["seconds_to_first_failure"] == 1.5


def test_running_stats_fed_out_of_order_equal_the_series_in_order() -> None:
    """With -j, runs finish out of order: the running statistics depend on the runs' indexes, not on that."""
    rng = random.Random(7)
    for _ in range(200):
        runs = rng.randint(1, 30)
        failed = [rng.random() < 0.3 for _ in range(runs)]
        durations = [round(rng.expovariate(5.0), 4) for _ in range(runs)]
        finished = [float(i + 1) for i in range(runs)]
        order = list(range(runs))
        rng.shuffle(order)
        running = RunningStats()
        for i in order:
            running.add(i, failed[i], durations[i], finished[i])
        assert running.stats() == series_stats(failed, durations, finished)


def test_a_series_longer_than_what_is_kept_keeps_a_uniform_sample() -> None:
    running = RunningStats(kept=1000)
    rng = random.Random(11)
    for i in range(50_000):
        running.add(i, i == 40_000, rng.random(), float(i))
    stats = running.stats()
    assert len(running.durations) == 1000  # bounded: the sample, not every run
    assert (stats.runs, stats.failures, stats.runs_to_first_failure) == (50_000, 1, 40_001)
    assert stats.seconds_to_first_failure == 40_000.0
    assert 0.999 < stats.duration_max <= 1.0  # exact, not sampled
    # Uniform durations on [0, 1): a uniform sample of 1000 puts the median within a few percent of 0.5
    # (its standard error is about 0.016), and so for the 90th percentile.
    assert abs(stats.duration_p50 - 0.5) < 0.08 and abs(stats.duration_p90 - 0.9) < 0.05
