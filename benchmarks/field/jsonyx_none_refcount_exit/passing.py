"""The same parsing as bug.py with the fixed release, jsonyx 2.2.1 (nineteendo/jsonyx#36).

setup.sh installs 2.2.1 into fixed-jsonyx-2.2.1/ inside the case's venv; it goes first on
sys.path here. Its C scanner keeps None's count balanced, so the parsing never reaches the
margin (parse_until_margin gives up after as many messages as None had references) and the
interpreter exits cleanly.
"""

import os
import sys

FIXED = os.path.join(sys.prefix, "fixed-jsonyx-2.2.1")
if not os.path.isdir(os.path.join(FIXED, "jsonyx")):
    raise RuntimeError(f"run setup.sh first: {FIXED} has no jsonyx 2.2.1")
sys.path.insert(0, FIXED)

import _jsonyx  # noqa: E402  (the C scanner of the fixed release)
import jsonyx  # noqa: E402
from _parse import parse_until_margin  # noqa: E402

assert _jsonyx.__file__.startswith(FIXED), _jsonyx.__file__
before = sys.getrefcount(None)
parsed = parse_until_margin()
after = sys.getrefcount(None)
if before - after > 50:
    raise RuntimeError(f"jsonyx from {jsonyx.__file__} still steals references to None")
print(f"parsed {parsed} messages; references to None {before} -> {after}")
