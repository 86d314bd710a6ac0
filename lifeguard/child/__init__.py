"""What a scenario body may call while it runs inside the child process.

The functions here talk to the supervisor through the run's result channel, an
append-only events file (one JSON object a line) whose descriptor the
supervisor passed down. They are safe to
call from any thread and from forked children (every event carries its pid).
"""

import _thread
import os
import time

from lifeguard.child import protocol

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from typing import Any


_write_lock = _thread.allocate_lock()  # threading.Lock itself, without importing threading (milliseconds)


def emit(kind: str, **fields: "Any") -> None:
    """Append one event line to the result channel (no-op outside a supervised run)."""
    fd_text = os.environ.get(protocol.EVENTS_FD_ENV)
    if not fd_text:
        path = os.environ.get(protocol.EVENTS_PATH_ENV)
        if not path:
            return
        fd_text = os.environ[protocol.EVENTS_FD_ENV] = str(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    # event_line's record, spelled out: an exit's events are on the run's own time (see _json).
    text = f'{{"{protocol.EVENT_KEY}": {_json(kind)}, "pid": {os.getpid()}, "time": {time.time()!r}'
    for key, value in fields.items():
        text += f", {_json(key)}: {_json(value)}"
    line = (text + "}\n").encode(errors="backslashreplace")
    # One write(2) per event on an O_APPEND descriptor: lines from several
    # processes never interleave, and nothing is buffered when the child dies.
    with _write_lock:
        try:
            os.write(int(fd_text), line)
        except OSError:
            pass


def event_line(record: "dict[str, Any]") -> bytes:
    """One line of the result channel: ``record`` as one JSON object, made here (no json import in the child,
    whose start-up every run pays); the supervisor reads it with json's C scanner, about ten times faster than
    a Python literal. A string's lone surrogates (undecodable bytes of a path) become \\udcXX escapes, which
    JSON reads back as they were."""
    return (_json(record) + "\n").encode(errors="backslashreplace")


def event_marker(kind: str) -> bytes:
    """An event's name as its line holds it: to find an event in the channel without reading it line by line."""
    return _json(kind).encode()


# JSON's escapes of a string's characters: the quote, the backslash and the control characters.
_JSON_ESCAPES = {**{code: f"\\u{code:04x}" for code in range(32)}, ord('"'): '\\"', ord("\\"): "\\\\"}


def _json(value: "Any") -> str:
    """``value`` as JSON text on one line; anything JSON has no word for (nan, inf, an object) as its repr.
    Exact types first, and a string with nothing to escape as it is: an exit's events are on the run's own
    time (a thread racing the interpreter's exit races lifeguard's work too: benchmarks/fidelity.py)."""
    kind = type(value)
    if kind is str:
        text: str = value
        if text.isprintable() and '"' not in text and "\\" not in text:
            return '"' + text + '"'
        return '"' + text.translate(_JSON_ESCAPES) + '"'
    if kind is int:
        return str(value)
    if kind is dict:
        return "{" + ", ".join([_json(str(k)) + ": " + _json(v) for k, v in value.items()]) + "}"
    if kind is float and value - value == 0:  # finite
        return repr(value)
    if kind is list or kind is tuple:
        return "[" + ", ".join([_json(v) for v in value]) + "]"
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    # A subclass (an IntEnum, a namedtuple, a str of a library's own type): as the exact type it extends.
    if isinstance(value, str):
        return _json(str.__str__(value))
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and value - value == 0:  # finite
        return repr(float(value))
    if isinstance(value, (list, tuple)):
        return _json(list(value))
    if isinstance(value, dict):
        return _json(dict(value))
    return _json(repr(value))


def report_corruption(message: str, data: bytes | None = None) -> None:
    """Tell the supervisor that the scenario saw broken data.

    The run's outcome becomes ``corrupted`` (unless it also crashed or hung);
    ``message`` and a hex dump of ``data`` (first 256 bytes) are kept as evidence.
    """
    fields: dict[str, Any] = {"message": message}
    if data is not None:
        fields["data_hex"] = bytes(data[:256]).hex()
        fields["data_len"] = len(data)
    emit(protocol.CORRUPTED, **fields)


_jitter_rng = None


def hook_point() -> None:
    """A place where the ``jitter`` perturbation may sleep a few random microseconds.

    Call it in scenario code between steps whose interleaving matters. Free when
    the perturbation is off. Native fixtures read LIFEGUARD_JITTER_US the same way.
    """
    global _jitter_rng
    limit = os.environ.get(protocol.JITTER_ENV)
    if not limit:
        return
    if _jitter_rng is None:
        import random

        _jitter_rng = random.Random(int(os.environ.get(protocol.SEED_ENV, "0")))
    time.sleep(_jitter_rng.uniform(0, int(limit)) / 1e6)


def variant() -> str:
    """The variant this run exercises: ``buggy``, ``fixed`` or ``default``."""
    return os.environ.get(protocol.VARIANT_ENV, "default")


def note(message: str) -> None:
    """Record a free-form note in the run's evidence (shown in reports)."""
    emit(protocol.NOTE, message=message)
