"""lifeguard's stdout when its reader goes away (``| head -1``): a real pipe whose read end is closed gives
a real EPIPE; the writer must go quiet, not raise, and the interpreter's last flush must still succeed."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import pytest

from lifeguard.report.stream import SafeOutput


@pytest.fixture
def orphaned_pipe() -> Iterator[io.TextIOWrapper]:
    """A text stream on a pipe whose reader has gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")
    yield stream
    stream.close()


def test_a_write_to_a_pipe_nobody_reads_silences_the_stream(orphaned_pipe: io.TextIOWrapper) -> None:
    with pytest.raises(BrokenPipeError):  # the premise: this is what an unguarded print meets
        orphaned_pipe.write("unguarded\n")
        orphaned_pipe.flush()
    out = SafeOutput(orphaned_pipe)
    out.write("first line\n")
    assert out.gone
    out.write("later lines are dropped\n")  # no second attempt, no exception
    # The descriptor now points at /dev/null: what is still buffered flushes (at exit) without an error.
    orphaned_pipe.write("buffered at exit\n")
    orphaned_pipe.flush()
    assert os.path.samestat(os.fstat(orphaned_pipe.fileno()), os.stat(os.devnull))


def test_a_working_stream_gets_every_write_flushed() -> None:
    stream = io.StringIO()
    out = SafeOutput(stream)
    out.write("one\n")
    out.write("two\n")
    assert stream.getvalue() == "one\ntwo\n" and not out.gone and not out.isatty()


def test_text_the_encoding_cannot_hold_is_escaped_not_refused() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    SafeOutput(stream).write("caf\u00e9 \u2713\n")
    assert raw.getvalue() == b"caf\\xe9 \\u2713\n"


def test_a_closed_stream_is_silent() -> None:
    stream = io.StringIO()
    stream.close()
    out = SafeOutput(stream)
    out.write("nobody\n")
    assert out.gone
