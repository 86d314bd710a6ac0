"""What the supervisor reads of a run's result channel, and what a run's text may put into the reports, is
bounded: a line too long is cut and marked, events past a run's budget are counted and dropped (the vital
ones kept, slimmed), and reasons, notes and corruption messages are cut with a marker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lifeguard.child import event_line, event_marker, protocol
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import (
    MAX_CORRUPTIONS,
    MAX_NOTES,
    MESSAGE_CHARS,
    NOTE_CHARS,
    REASON_CHARS,
    Corruption,
    RunResult,
)
from lifeguard.run.channel import EVENT_LINE_BYTES, EVENTS_BYTES, MAX_EVENTS, VITAL_TEXT_CHARS, read_channel
from lifeguard.run.classify import phase_of


def line(kind: str, pid: int = 7, **fields: object) -> bytes:
    """An event line as child.emit writes it."""
    return event_line({protocol.EVENT_KEY: kind, "pid": pid, "time": 1.5, **fields})


def test_a_line_longer_than_the_limit_is_cut_marked_and_the_rest_skipped(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    huge = 3 * EVENT_LINE_BYTES + 123
    with open(events, "wb") as f:
        f.write(line(protocol.STARTED))
        head = b'{"event": "note", "pid": 7, "time": 1.5, "message": "'
        f.write(head + b"x" * (huge - len(head) - 3) + b'"}\n')
        f.write(line(protocol.BODY_END))
    channel = read_channel(events)
    assert [e.name for e in channel.events] == [protocol.STARTED, protocol.NOTE, protocol.BODY_END]
    note = channel.events[1]
    assert (note.pid, note.time, note.get("cut")) == (7, 1.5, huge)
    message = note.get("message")
    assert message.startswith("xxxx") and message.endswith(f"[... line of {huge} bytes cut to {EVENT_LINE_BYTES}]")
    assert len(message) < EVENT_LINE_BYTES + 100
    assert (channel.cut_lines, channel.longest, channel.dropped) == (1, huge, 0)
    assert f"the longest had {huge} bytes" in (channel.note() or "")
    assert phase_of(channel.events, 7) is Phase.EXIT  # the line after the cut one was read as usual


def test_a_cut_line_that_is_no_event_is_left_out(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    events.write_bytes(b"z" * (2 * EVENT_LINE_BYTES) + b"\n" + line(protocol.BODY_START))
    channel = read_channel(events)
    assert [e.name for e in channel.events] == [protocol.BODY_START] and channel.cut_lines == 1


def test_events_past_the_budget_are_counted_and_the_vital_ones_kept_slim(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    notes = 3 * MAX_EVENTS
    with open(events, "wb") as f:
        f.write(line(protocol.STARTED) + line(protocol.BODY_START))
        for n in range(notes):
            f.write(line(protocol.NOTE, message=f"note {n}"))
        f.write(line(protocol.BODY_END))
        f.write(line(protocol.CORRUPTED, message="m" * 5000, data_hex="00ff", data_len=2))
        f.write(line(protocol.ATEXIT_DONE, extensions=["a.so", "b.so"]))
    channel = read_channel(events)
    names = [e.name for e in channel.events]
    assert names.count(protocol.NOTE) == MAX_EVENTS - 2 and channel.dropped == notes - (MAX_EVENTS - 2)
    assert channel.dropped_bytes == sum(len(line(protocol.NOTE, message=f"note {n}")) for n in range(MAX_EVENTS - 2,
                                                                                                      notes))
    assert names[-3:] == [protocol.BODY_END, protocol.CORRUPTED, protocol.ATEXIT_DONE]
    corrupted, atexit = channel.events[-2:]
    assert corrupted.get("message") == "m" * VITAL_TEXT_CHARS and corrupted.get("data_len") == 2
    assert atexit.get("extensions") is None  # lists are left out of a slimmed event
    assert phase_of(channel.events, 7) is Phase.EXIT
    assert f"{channel.dropped} event(s)" in (channel.note() or "")


def test_the_events_kept_stay_within_the_byte_budget(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    with open(events, "wb") as f:
        for n in range(40):
            f.write(line(protocol.NOTE, message=chr(ord("a") + n % 26) * (EVENT_LINE_BYTES - 100)))
    channel = read_channel(events)
    size = len(line(protocol.NOTE, message="a" * (EVENT_LINE_BYTES - 100)))  # each line: under the line limit
    assert size < EVENT_LINE_BYTES and len(channel.events) == EVENTS_BYTES // size
    assert channel.dropped == 40 - len(channel.events) and channel.cut_lines == 0


def test_a_clean_channel_gets_no_note(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    events.write_bytes(line(protocol.STARTED) + line(protocol.BODY_START) + line(protocol.BODY_END))
    assert read_channel(events).note() is None
    assert read_channel(tmp_path / "missing.txt").events == []


RUN = RunResult(scenario="s", variant="default", index=0, outcome=Outcome.CORRUPTED, phase=Phase.RUN,
                expected="passed", signal=None, exit_code=0, duration=0.1, python="3.11.7", run_dir="/r")


def test_a_runs_text_is_cut_with_a_marker_however_the_result_is_made() -> None:
    result = replace(RUN, reason="r" * (10 * REASON_CHARS), notes=tuple("n" * (3 * NOTE_CHARS) for _ in range(80)),
                     corruption=tuple(Corruption(1, "c" * 100_000, "ab" * 10_000, 10_000) for _ in range(40)))
    marker = f" [... {10 * REASON_CHARS} characters, cut]"
    assert result.reason == "r" * (REASON_CHARS - len(marker)) + marker and len(result.reason) == REASON_CHARS
    assert len(result.notes) == MAX_NOTES + 1 and result.notes[-1] == f"{80 - MAX_NOTES} more note(s) not kept"
    assert all(len(note) <= NOTE_CHARS for note in result.notes)
    assert len(result.corruption) == MAX_CORRUPTIONS
    assert all(len(c.message) <= MESSAGE_CHARS and len(c.data_hex) == 512 and c.data_len == 10_000
               for c in result.corruption)
    assert len(str(result.to_dict())) < 200_000
    assert replace(result, index=1).reason == result.reason  # already bounded: unchanged
    assert replace(RUN, reason="short").reason == "short"


def test_every_value_a_run_sends_reads_back_from_its_json_line(tmp_path: Path) -> None:
    """Text with quotes, backslashes, control characters, non-ASCII and the lone surrogates of undecodable path
    bytes comes back as it was sent; what JSON has no word for (nan, an object) comes back as its repr."""
    text = 'a "quoted" \\ back\nslash\x01 \u00e9 \udc80\udcff end'
    sent = line(protocol.NOTE, message=text, values=[1, 2.5, None, True, False, float("nan"), (3, "t")],
                nested={"k": {"inner": [text]}, 5: "int key"}, thing=Path("/p"))
    assert sent.count(b"\n") == 1 and sent.startswith(b'{"event": ')
    events = tmp_path / protocol.EVENTS_FILE
    events.write_bytes(sent)
    (note,) = read_channel(events).events
    assert note.get("message") == text
    assert note.get("values") == [1, 2.5, None, True, False, "nan", [3, "t"]]
    assert note.get("nested") == {"k": {"inner": [text]}, "5": "int key"}
    assert note.get("thing") == repr(Path("/p"))


def test_lines_an_earlier_lifeguard_wrote_as_python_literals_are_still_read(tmp_path: Path) -> None:
    events = tmp_path / protocol.EVENTS_FILE
    huge = 2 * EVENT_LINE_BYTES
    head = b"{'event': 'note', 'pid': 7, 'time': 1.5, 'message': '"
    events.write_bytes(b"{'event': 'body-start', 'pid': 7, 'time': 1.5}\n" + head + b"y" * (huge - len(head) - 3)
                       + b"'}\n" + b"{'event': 'body-end', 'pid': 7, 'time': 2.5, 'exit': '0'}\n")
    channel = read_channel(events)
    assert [e.name for e in channel.events] == [protocol.BODY_START, protocol.NOTE, protocol.BODY_END]
    assert channel.events[1].get("message").startswith("yyyy") and channel.events[2].get("exit") == "0"


def test_an_event_is_found_by_its_marker_in_the_line_that_holds_it() -> None:
    """The supervisor finds a body's start in the channel without reading it line by line (a deadline that
    counts from the body, a head start's wait): by the name as the line holds it, and in no other event's."""
    start = line(protocol.BODY_START)
    assert event_marker(protocol.BODY_START) in start
    assert event_marker(protocol.BODY_START) not in line(protocol.NOTE, message="body-start-ish")


def test_emit_writes_the_line_event_line_makes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """emit spells its record out on the run's own time (an exit's events); what it writes reads back as
    event_line's record of the same values would."""
    import os
    import time

    from lifeguard.child import emit

    events = tmp_path / protocol.EVENTS_FILE
    monkeypatch.delenv(protocol.EVENTS_FD_ENV, raising=False)
    monkeypatch.setenv(protocol.EVENTS_PATH_ENV, str(events))
    monkeypatch.setattr(time, "time", lambda: 1.5)
    text = 'a "quoted" \\ back\nslash\x01 \u00e9 \u2028 \udc80 end'
    fields = {"message": text, "values": [1, 2.5, None, True, float("inf"), (3, "t")], "nested": {"k": [text]}}
    try:
        emit(protocol.NOTE, **fields)  # type: ignore[arg-type]
        written = events.read_bytes()
    finally:
        fd = os.environ.pop(protocol.EVENTS_FD_ENV, None)
        if fd is not None:
            os.close(int(fd))
    assert written == line(protocol.NOTE, pid=os.getpid(), **fields)
    (note,) = read_channel(events).events
    assert note.get("message") == text and note.get("values") == [1, 2.5, None, True, "inf", [3, "t"]]
