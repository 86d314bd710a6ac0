"""Text from a run made safe for each place lifeguard writes it: one function per target.

Whatever a child prints, raises or names can hold escape sequences that would act on a terminal (colour,
cursor moves, a new window title), characters XML 1.0 forbids (NUL and the other C0 controls but tab,
newline and carriage return; U+FFFE, U+FFFF) and lone surrogates (``os.fsdecode`` of bytes that are not
UTF-8), which no UTF-8 file can hold at all. Each sink passes what it writes through its target's function:

- ``for_terminal``: controls, DEL, C1 controls and the marks that reorder or hide text shown as ``\\x1b``,
  ``\\r``, ``\\u202e``... instead of acting;
- ``for_xml`` (junit.xml) and ``for_html`` (report.html): the same, and the characters XML 1.0 forbids;
- ``for_json`` (results.jsonl, report.json): the data as it is (JSON escapes controls itself), but no lone
  surrogate and no NaN/Infinity, which are not JSON: always valid UTF-8 JSON.

A lone surrogate that stands for an undecodable byte (U+DC80..U+DCFF, Python's ``surrogateescape``) is
shown as that byte, ``\\xff``; any other as ``\\udNNN``.
"""

from __future__ import annotations

import math
import re
from typing import Any

_SURROGATES = "\ud800-\udfff"
# What a terminal would act on rather than show: C0 controls but tab and newline, DEL, C1 controls, the
# Unicode marks that reorder or hide text (bidirectional overrides and isolates, line separators), and
# lone surrogates (not text: a strict UTF-8 stream cannot even encode them).
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069{_SURROGATES}]")
# XML 1.0's Char production leaves out the surrogates and U+FFFE, U+FFFF besides the C0 controls.
_XML = re.compile("[\ufffe\uffff]")
_LONE_SURROGATE = re.compile(f"[{_SURROGATES}]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte it stands for
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: str) -> str:
    """``text`` safe to print on a terminal: a child's escape sequences, carriage returns and other
    controls shown as ``\\x1b``, ``\\r``... instead of acting (a newline before which a ``\\r`` only ends
    a Windows line stays a plain newline)."""
    return _TERMINAL.sub(_shown, text.replace("\r\n", "\n"))


def for_xml(text: str) -> str:
    """``text`` as XML 1.0 can carry it (ElementTree escapes ``<``, ``&`` and quotes itself), and as a CI
    page shows it: what for_terminal shows, and U+FFFE/U+FFFF, shown too."""
    return _XML.sub(_shown, for_terminal(text))


def for_html(text: object) -> str:
    """``text`` for report.html: for_xml's characters shown, then HTML-escaped."""
    import html  # only where the page is written: the terminal's start-up does without html.entities

    return html.escape(for_xml(str(text)))


def _json_text(text: str) -> str:
    return _LONE_SURROGATE.sub(_shown, text)


def for_json(value: Any) -> Any:
    """``value`` (a run's or a report's dict) with JSON types only: every string without lone
    surrogates, NaN and infinities as null, tuples as lists, anything else as its (cleaned) text."""
    if isinstance(value, str):
        return _json_text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_json_text(str(key)): for_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [for_json(item) for item in value]
    return _json_text(str(value))
