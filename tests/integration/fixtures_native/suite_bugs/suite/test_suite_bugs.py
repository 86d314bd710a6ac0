"""suite_bugs' own tests, as its authors wrote them: every one passes in a plain run, with either build.

Four of them leave behind an object whose lifetime bug only a test-suite probe reaches (see suite_bugs.c):
test_square_all (fork-rerun), test_stream_checksum (fork-finalize), test_context_counts_submissions
(gc-thread) and the graph tests (gc-cycle, and gc-thread too: a graph crashes when collected in a cycle on any
thread).
"""

from __future__ import annotations

import threading
import zlib

import pytest
import suite_bugs
from suite_bugs import Context, Graph, Stream, get_pool


def test_square_all(numbers: list[int]) -> None:
    pool = get_pool(2)
    assert pool.square_all(numbers) == [n * n for n in numbers]


def test_get_pool_is_shared() -> None:
    assert get_pool(2) is get_pool(2)
    assert get_pool(3).workers == 3


@pytest.mark.parametrize(("value", "error"), [("7", TypeError), (1.5, TypeError), (None, TypeError),
                                              (2**32, OverflowError)])
def test_square_all_refuses(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        get_pool(2).square_all([1, value, 3])


def test_get_pool_refuses_sizes() -> None:
    for workers in (0, 65):
        with pytest.raises(ValueError, match="1 to 64 workers"):
            get_pool(workers)


@pytest.mark.skip(reason="slow: starts 64 threads")
def test_largest_pool() -> None:
    assert get_pool(64).square_all(list(range(1000)))[-1] == 999**2


def test_stream_checksum(payload: bytes) -> None:
    stream = Stream(4)
    view = memoryview(payload)
    for start in range(0, len(payload), 1000):
        stream.write(view[start:start + 1000])
    stream.flush()
    assert stream.bytes_sent == len(payload)
    assert stream.checksum == zlib.adler32(payload)


def test_stream_refuses_capacity() -> None:
    with pytest.raises(ValueError, match="1 to 1024 chunks"):
        Stream(0)
    with pytest.raises(TypeError):
        Stream("4")


def test_context_counts_submissions() -> None:
    context = Context("render")
    assert context.submit(3) == 3
    assert context.submit(2) == 5
    assert context.name == "render"
    assert context.thread == threading.get_ident()


def test_context_released_when_dropped() -> None:
    before = suite_bugs.live_contexts()
    context = Context("scratch")
    assert suite_bugs.live_contexts() == before + 1
    del context
    assert suite_bugs.live_contexts() == before


def test_context_needs_a_name() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        Context("")


def test_graph_degrees() -> None:
    ring = Graph(5)
    ring.label = "ring"
    for node in range(5):
        ring.add_edge(node, (node + 1) % 5)
    ring.add_edge(0, 2)
    assert [ring.degree(node) for node in range(5)] == [3, 2, 3, 2, 2]
    assert ring.nodes == 5


def test_graph_copy_is_independent() -> None:
    graph = Graph(3)
    graph.add_edge(0, 1)
    copy = graph.copy()
    copy.add_edge(0, 2)
    assert (graph.degree(0), copy.degree(0)) == (1, 2)


def test_graph_refuses_bad_nodes() -> None:
    with pytest.raises(ValueError, match="1 to 2048 nodes"):
        Graph(0)
    with pytest.raises(IndexError):
        Graph(3).degree(3)


def test_build_info() -> None:
    info = suite_bugs.build_info()
    assert info["threads"] == "pthread"
    assert info["max_workers"] == 64
    assert info["fixed"] in (0, 1)
