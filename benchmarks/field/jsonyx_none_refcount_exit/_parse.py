"""Parse JSON messages with jsonyx until the interpreter holds few references to None.

Shared by bug.py and passing.py (which differ only in which jsonyx they import).
"""

import sys

import jsonyx

# How many references to None may remain when the parsing stops. Each jsonyx 2.2.0 parse
# steals one (see bug.py), so stopping here leaves the debt to come due in finalization,
# which frees far more than this many references to None (module dicts, functions' and
# code objects' constants). A handshake on the state, not a fixed count: the interpreter's
# own number of references to None differs between runs under different launchers.
MARGIN = 1000
MESSAGES = ['{"id": 1, "ok": true}', "[1, 2, 3]", "0", '"pong"']


def parse_until_margin() -> int:
    """Parse messages until sys.getrefcount(None) <= MARGIN (bounded); return the count."""
    start = sys.getrefcount(None)
    parsed = 0
    limit = start + 10  # a decoder that steals nothing never gets there: stop after `start`
    while sys.getrefcount(None) > MARGIN and parsed < limit:
        jsonyx.loads(MESSAGES[parsed % len(MESSAGES)])
        parsed += 1
    return parsed
