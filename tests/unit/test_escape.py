"""Text from a run made safe per target (report.escape): every code point there is, through each function,
must come out as its target can hold it, and the text a reader needs must stay readable."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from lifeguard.report.escape import for_html, for_json, for_terminal, for_xml

# Every code point, lone surrogates included: whatever a child prints or raises is some of these.
EVERY_CHARACTER = "".join(chr(code) for code in range(0x110000))
HOSTILE = "nul\x00 esc\x1b[31mred\x1b[0m vt\x0b bell\x07 c1\x9b bidi\u202e fffe\ufffe ffff\uffff " \
          + os.fsdecode(b"byte\xff") + " high\ud800 tab\t cr\r crlf\r\n caf\u00e9 \u2713"
# XML 1.0's Char production, as a pattern of what may NOT appear.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def test_the_terminal_gets_no_control_character_and_no_surrogate() -> None:
    shown = for_terminal(EVERY_CHARACTER)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]", shown)
    shown.encode("utf-8")  # a strict UTF-8 terminal takes it
    assert for_terminal(HOSTILE) == ("nul\\x00 esc\\x1b[31mred\\x1b[0m vt\\x0b bell\\x07 c1\\x9b bidi\\u202e "
                                     "fffe\ufffe ffff\uffff byte\\xff high\\ud800 tab\t cr\\r crlf\n caf\u00e9 \u2713")


def test_xml_gets_only_what_xml_1_0_allows_and_parses_back() -> None:
    text = for_xml(EVERY_CHARACTER)
    assert not NOT_XML.search(text)
    element = ET.Element("failure", message=for_xml(HOSTILE))
    element.text = text
    parsed = ET.fromstring(ET.tostring(element, encoding="utf-8"))
    assert parsed.get("message") == for_xml(HOSTILE)
    assert "\\x1b[31mred" in parsed.get("message", "") and "fffe\\ufffe ffff\\uffff byte\\xff" in for_xml(HOSTILE)


def test_html_is_escaped_after_the_characters_are_shown() -> None:
    page = for_html("<b>" + HOSTILE + "</b>")
    assert page.startswith("&lt;b&gt;nul\\x00 esc\\x1b[31m") and page.endswith("&lt;/b&gt;")
    assert not NOT_XML.search(for_html(EVERY_CHARACTER))
    for_html(EVERY_CHARACTER).encode("utf-8")


def test_json_keeps_the_data_but_no_surrogate_and_no_nan() -> None:
    value = {"reason": HOSTILE, "every": EVERY_CHARACTER, os.fsdecode(b"key\xfe"): [float("nan"), float("inf"),
             1.5, (1, True, None)], "path": os.fsdecode(b"/tmp/\xff")}
    cleaned = for_json(value)
    for ascii_only in (True, False):
        text = json.dumps(cleaned, ensure_ascii=ascii_only, allow_nan=False)  # NaN is not JSON
        assert json.loads(text.encode("utf-8")) == cleaned  # strict UTF-8, and it reads back the same
    assert cleaned["reason"].startswith("nul\x00 esc\x1b[31m")  # JSON carries controls itself: kept as data
    assert "byte\\xff high\\ud800" in cleaned["reason"]
    assert cleaned["key\\xfe"] == [None, None, 1.5, [1, True, None]]
    assert cleaned["path"] == "/tmp/\\xff"


@pytest.mark.parametrize("function", [for_terminal, for_xml, for_json])
def test_plain_text_is_left_alone(function: object) -> None:
    text = "deadline of 5 s passed; thread 12 'worker' in caf\u00e9.py:3 \u2713\n\tindented"
    assert function(text) == text  # type: ignore[operator]
