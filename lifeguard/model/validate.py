"""Validators for the values a user gives: one set for the CLI, the pytest options and ini, the marker,
the fixture and ``@scenario``.

Each takes the value and where it came from ("--timeout from command line", "timeout from marker on
test_x") and raises ValueError with a message that starts with that source, so every front end reports
a bad value the same way (pytest-timeout's ``_validate_timeout(value, "marker")``).
"""

from __future__ import annotations

import math
from typing import Any

SEED_LIMIT = 2**32
# Bounds past any real use: a value beyond them is a typo (or hostile), refused in one line, not a traceback
# or a session that never ends.
MAX_SECONDS = 10**7  # about 116 days
MAX_COUNT = 10**9  # runs of a series
MAX_JOBS = 4096  # runs in parallel
MAX_SHARDS = 10_000


def _where(source: str, problem: str) -> str:
    """``source: problem``; an empty source (argparse names the option itself) gives the problem alone."""
    return f"{source}: {problem}" if source else problem


def positive_seconds(value: Any, source: str) -> float:
    """Seconds: a finite number above zero."""
    if isinstance(value, bool):
        raise ValueError(_where(source, f"{_short(value)} is not a number of seconds"))
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        raise ValueError(_where(source, f"{_short(value)} must be at most {MAX_SECONDS:,} seconds")) from None
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{_short(value)} is not a number of seconds")) from None
    if not number > 0 or math.isinf(number):
        raise ValueError(_where(source, f"{_short(value)} must be a positive number of seconds"))
    if number > MAX_SECONDS:
        raise ValueError(_where(source, f"{_short(value)} must be at most {MAX_SECONDS:,} seconds"))
    return number


def positive_count(value: Any, source: str, limit: int = MAX_COUNT) -> int:
    """A count from 1 to ``limit`` (an int, or text holding one; never a float or a bool)."""
    if isinstance(value, (bool, float)):
        raise ValueError(_where(source, f"{_short(value)} is not a whole number"))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{_short(value)} is not a whole number")) from None
    if number < 1:
        raise ValueError(_where(source, f"{_short(value)} must be at least 1"))
    if number > limit:
        raise ValueError(_where(source, f"{_short(value)} must be at most {limit:,}"))
    return number


def jobs(value: Any, source: str) -> int:
    """Runs in parallel: 1 to MAX_JOBS."""
    return positive_count(value, source, MAX_JOBS)


def seed(value: Any, source: str) -> int:
    """A run seed: a whole number in [0, 2**32), decimal or 0x-prefixed."""
    if isinstance(value, (bool, float)):
        raise ValueError(_where(source, f"{_short(value)} is not a whole number"))
    try:
        number = int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{_short(value)} is not a whole number")) from None
    if not 0 <= number < SEED_LIMIT:
        raise ValueError(_where(source, f"{_short(value)} must be between 0 and 2**32-1"))
    return number


def shard(value: Any, source: str) -> tuple[int, int]:
    """``K/N``: shard K of N, 1 <= K <= N."""
    text = str(value).strip()
    first, slash, second = text.partition("/")
    if not slash or not first.isdigit() or not second.isdigit():
        raise ValueError(_where(source, f"{_short(value)} is not K/N (shard K of N, e.g. 2/3)"))
    if len(second) > 6 or int(second) > MAX_SHARDS:
        raise ValueError(_where(source, f"{_short(value)}: N must be at most {MAX_SHARDS:,}"))
    number, count = int(first), int(second)
    if not 1 <= number <= count:
        raise ValueError(_where(source, f"{_short(value)}: K must be between 1 and N"))
    return number, count


def _short(value: Any) -> str:
    """A value as the user gave it, cut to a line (a 400-digit --repeat is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
