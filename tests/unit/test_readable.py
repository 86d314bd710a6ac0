"""lifeguard.child.readable: waits on descriptors of any number (select() refuses those above 1023)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

from lifeguard.child.readable import readable


@pytest.fixture
def high_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose read end is numbered 1500."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1500)
    os.close(read_end)
    try:
        yield high, write_end
    finally:
        os.close(high)
        os.close(write_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_descriptor_above_1023_is_waited_on(high_pipe: tuple[int, int]) -> None:
    read_end, write_end = high_pipe
    assert readable([read_end], 0) == []  # nothing written yet: the time is up at once
    os.write(write_end, b"x")
    assert readable([read_end], 5.0) == [read_end]


def test_only_the_ready_ones_come_back_in_the_order_given(high_pipe: tuple[int, int]) -> None:
    read_end, write_end = high_pipe
    other_read, other_write = os.pipe()
    try:
        os.write(write_end, b"x")
        assert readable([other_read, read_end], 5.0) == [read_end]
        os.close(other_write)  # end of file counts as readable
        assert readable([other_read, read_end], 5.0) == [other_read, read_end]
    finally:
        os.close(other_read)
