"""How --shard K/N splits a plan's runs: every run in exactly one shard, the shards about even."""

from __future__ import annotations

import pytest

from lifeguard.model.validate import shard
from lifeguard.plan.scheduler import first_in_shard


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_every_run_of_every_series_is_in_exactly_one_shard(count: int) -> None:
    caps = [1, 2, 5, 13, 100]
    per_shard = [0] * count
    for position, cap in enumerate(caps):
        owners = []
        for number in range(1, count + 1):
            first, step = first_in_shard(position, (number, count))
            indices = list(range(first, cap, step))
            per_shard[number - 1] += len(indices)
            owners.extend(indices)
        assert sorted(owners) == list(range(cap))
    assert max(per_shard) - min(per_shard) <= len(caps)  # each series adds at most one run of imbalance


def test_shard_values_are_checked() -> None:
    assert shard("2/3", "--shard") == (2, 3)
    for bad, why in (("3", "is not K/N"), ("0/3", "between 1 and N"), ("4/3", "between 1 and N"), ("a/b", "K/N")):
        with pytest.raises(ValueError, match=why):
            shard(bad, "--shard")
