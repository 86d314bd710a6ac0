"""The result channel read back: every event a run's processes wrote, bounded (a child may write anything
there) and typed (an event whose fields are not what lifeguard writes is a note on the run, never an error)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from lifeguard.child import protocol
from lifeguard.model.result import Event

# The result channel is the child's to write, and a child may write anything there: one 300 MiB line took the
# supervisor to 2.4 GB and went into report.json and results.jsonl whole. What the supervisor reads is bounded.
# One event line: the bootstrap's largest (atexit-done's 200 extension modules, a fork's inventory of 64
# threads) is about 10 KiB. A longer line is cut to this, marked, and the rest of it skipped, never read whole.
EVENT_LINE_BYTES = 64 * 1024
# The events one run keeps (its result, report.json): this many lines and bytes; later ones are counted and
# dropped (a note says how many), except the vital ones below.
MAX_EVENTS = 200
EVENTS_BYTES = 256 * 1024
# Past that budget a run still keeps the events its outcome and phase rest on (body-start, body-end, atexit-done,
# forked, corrupted...: a body that wrote thousands of notes and then crashed at exit still crashed at exit),
# each without its lists and with its text cut to VITAL_TEXT_CHARS, up to MAX_VITAL_EVENTS of them.
MAX_VITAL_EVENTS = 1000
VITAL_TEXT_CHARS = 200
VITAL_EVENTS = frozenset({protocol.STARTED, protocol.BODY_START, protocol.BODY_END, protocol.BODY_ERROR,
                          protocol.ATEXIT_DONE, protocol.FORKED, protocol.FORK_CHILD, protocol.FORK_CHILD_EXIT,
                          protocol.ATTACHED, protocol.CORES_ON, protocol.CORRUPTED, protocol.PYTEST_OUTCOME,
                          protocol.PROBE_EXERCISED})
SKIP_CHUNK = 1024 * 1024  # read size while skipping the rest of a cut line
assert EVENT_LINE_BYTES * 4 <= EVENTS_BYTES  # a run keeps several lines of the longest kind
# The start of every line child.emit writes (a JSON object whose first keys are these; a Python literal from
# a run of an earlier lifeguard): what a cut line still says.
_CUT_HEAD = re.compile(rb"\{([\"'])" + protocol.EVENT_KEY.encode() + rb"\1: \1([^\"'\\]*)\1, \1pid\1: (\d+), "
                       rb"\1time\1: ([0-9.eE+-]+)(?:, \1([^\"'\\]+)\1: (.*))?", re.DOTALL)


@dataclass
class Channel:
    """What the supervisor read of a run's result channel: the events kept, and what was cut or dropped."""

    events: list[Event] = field(default_factory=list)
    cut_lines: int = 0  # lines longer than EVENT_LINE_BYTES, kept cut
    longest: int = 0  # bytes of the longest line
    dropped: int = 0  # events past the budget, not kept
    dropped_bytes: int = 0
    malformed: int = 0  # lines that are no event lifeguard wrote (not JSON, or the wrong shape)
    bad_fields: int = 0  # fields of an event with a type lifeguard never writes, dropped from it

    def note(self) -> str | None:
        """One line for the run's notes when anything was cut, dropped or malformed."""
        parts = []
        if self.malformed:
            parts.append(f"{self.malformed} line(s) that are not events of lifeguard's ignored")
        if self.bad_fields:
            parts.append(f"{self.bad_fields} event field(s) of the wrong type dropped")
        if self.cut_lines:
            parts.append(f"{self.cut_lines} event line(s) longer than {EVENT_LINE_BYTES} bytes cut to that "
                         f"(the longest had {self.longest} bytes)")
        if self.dropped:
            parts.append(f"{self.dropped} event(s) ({self.dropped_bytes} bytes) past the {MAX_EVENTS} events or "
                         f"{EVENTS_BYTES} bytes a run keeps dropped")
        if not parts:
            return None
        return f"result channel: {'; '.join(parts)} (a failed run's folder keeps {protocol.EVENTS_FILE} whole)"


def read_channel(path: Path) -> Channel:
    """The result channel (one JSON object a line, see child.emit), read within its bounds: at most
    EVENT_LINE_BYTES of a line, MAX_EVENTS and EVENTS_BYTES of kept events, vital events past them slimmed."""
    channel = Channel()
    kept_bytes = vital = 0
    try:
        with open(path, "rb") as f:
            while line := f.readline(EVENT_LINE_BYTES):
                size = len(line)
                if size == EVENT_LINE_BYTES and not line.endswith(b"\n"):
                    size += _skip_line(f)
                    channel.cut_lines += 1
                    event = _cut_event(line, size)
                else:
                    event = _parse(line, channel)
                channel.longest = max(channel.longest, size)
                if event is None:
                    continue  # a line cut short by a crash mid-write, or no event at all
                kept = min(size, EVENT_LINE_BYTES)
                if len(channel.events) < MAX_EVENTS and kept_bytes + kept <= EVENTS_BYTES:
                    channel.events.append(event)
                    kept_bytes += kept
                elif event.name in VITAL_EVENTS and vital < MAX_VITAL_EVENTS:
                    channel.events.append(_slim(event))
                    vital += 1
                else:
                    channel.dropped += 1
                    channel.dropped_bytes += size
    except OSError:
        pass
    return channel


def read_events(path: Path) -> list[Event]:
    """The events of the result channel, within its bounds (read_channel)."""
    return read_channel(path).events


# The fields lifeguard reads from events, as the child writes them. The result channel is the program's to
# write too: a field of any other type (a hostile or broken program) is dropped from its event, never read.
_NONE = type(None)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "child": (int,), "status": (int,), "parent": (int,), "forking_thread": (int, _NONE), "main_thread": (int,),
    "thread": (int,), "generation": (int, _NONE), "data_len": (int,), "message": (str,), "data_hex": (str,),
    "error": (str,), "exit": (str,), "thread_name": (str,), "outcome": (str,), "reason": (str,), "cwd": (str,),
    "executable": (str,), "python": (list,), "argv": (list,), "extensions": (list,), "parent_threads": (list,),
    "stack": (list,), "why": (str,),
}


def _typed(key: str, value: Any) -> bool:
    types = FIELD_TYPES.get(key)
    if types is None:
        return True
    if isinstance(value, bool) or not isinstance(value, types):
        return False
    if isinstance(value, list) and key == "parent_threads":
        return all(isinstance(t, dict) and isinstance(t.get("tid"), int) for t in value)
    if isinstance(value, list):  # extensions, argv, stack: names
        return key == "python" or all(isinstance(item, str) for item in value)
    return True


def _parse(line: bytes, channel: Channel) -> Event | None:
    try:
        if line.startswith(b'{"'):  # JSON, as child.emit writes it
            record = json.loads(line)
        else:  # a Python literal, as an earlier lifeguard wrote it
            record = ast.literal_eval(line.decode(errors="replace"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):  # json's errors are ValueErrors
        if line.endswith(b"\n"):  # a whole line that is no event (one cut short by a crash is not counted)
            channel.malformed += 1
        return None
    if not isinstance(record, dict):
        channel.malformed += 1
        return None
    name, pid, when = record.get(protocol.EVENT_KEY), record.get("pid"), record.get("time")
    if (not isinstance(name, str) or not isinstance(pid, int) or isinstance(pid, bool)
            or not isinstance(when, (int, float, _NONE)) or isinstance(when, bool)):
        channel.malformed += 1
        return None
    fields = {key: value for key, value in record.items() if key not in (protocol.EVENT_KEY, "pid", "time")}
    typed = {key: value for key, value in fields.items() if _typed(key, value)}
    channel.bad_fields += len(fields) - len(typed)
    return Event(name, pid, when, typed)


def _skip_line(f: BinaryIO) -> int:
    """Read past the rest of a line, a chunk at a time; the bytes skipped."""
    skipped = 0
    while chunk := f.readline(SKIP_CHUNK):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _cut_event(head: bytes, size: int) -> Event | None:
    """A line too long to keep: its event, pid and time, and the start of its first field, marked as cut."""
    match = _CUT_HEAD.match(head)
    if match is None:
        return None
    _, name, pid, when, key, value = match.groups()
    try:
        fields: dict[str, Any] = {"cut": size}
        if key is not None:
            text = value.decode(errors="replace").lstrip("'\"")
            fields[key.decode()] = f"{text} [... line of {size} bytes cut to {EVENT_LINE_BYTES}]"
        return Event(name.decode(errors="replace"), int(pid), float(when), fields)
    except ValueError:
        return None


def _slim(event: Event) -> Event:
    """A vital event past the budget: its text fields cut short, its lists and dicts left out."""
    fields = {k: v[:VITAL_TEXT_CHARS] if isinstance(v, str) else v for k, v in event.fields.items()
              if isinstance(v, (str, int, float, bool)) or v is None}
    return Event(event.name, event.pid, event.time, fields)
