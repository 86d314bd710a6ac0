"""Blind judging: the tables switched off, so a finding must come from the shape of the evidence.

``LIFEGUARD_BLIND`` names what the tables must not know: ``all`` (every runtime of diagnose/runtimes.py and
every named message of diagnose/messages.py), or names separated by commas (a table entry is off when one of
them appears in what it names: a runtime's name, libraries or symbols; a message's library). Rules decide from
the stacks, the kernel's readings and the messages' shapes; a table only adds names. ``benchmarks/accuracy.py
--blind`` judges the field corpus so.
"""

from __future__ import annotations

import os

BLIND_ENV = "LIFEGUARD_BLIND"


def blinded(*names: str) -> bool:
    """Is a table entry that names ``names`` switched off?"""
    value = os.environ.get(BLIND_ENV, "").strip().lower()
    if not value:
        return False
    if value == "all":
        return True
    words = [word.strip() for word in value.split(",") if word.strip()]
    text = " ".join(names).lower()
    return any(word in text for word in words)
