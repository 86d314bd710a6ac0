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


def _where(source: str, problem: str) -> str:
    """``source: problem``; an empty source (argparse names the option itself) gives the problem alone."""
    return f"{source}: {problem}" if source else problem


def positive_seconds(value: Any, source: str) -> float:
    """Seconds: a finite number above zero."""
    if isinstance(value, bool):
        raise ValueError(_where(source, f"{value!r} is not a number of seconds"))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{value!r} is not a number of seconds")) from None
    if not number > 0 or math.isinf(number):
        raise ValueError(_where(source, f"{value!r} must be a positive number of seconds"))
    return number


def positive_count(value: Any, source: str) -> int:
    """A count of at least 1 (an int, or text holding one; never a float or a bool)."""
    if isinstance(value, (bool, float)):
        raise ValueError(_where(source, f"{value!r} is not a whole number"))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{value!r} is not a whole number")) from None
    if number < 1:
        raise ValueError(_where(source, f"{value!r} must be at least 1"))
    return number


def seed(value: Any, source: str) -> int:
    """A run seed: a whole number in [0, 2**32), decimal or 0x-prefixed."""
    if isinstance(value, (bool, float)):
        raise ValueError(_where(source, f"{value!r} is not a whole number"))
    try:
        number = int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(_where(source, f"{value!r} is not a whole number")) from None
    if not 0 <= number < SEED_LIMIT:
        raise ValueError(_where(source, f"{value!r} must be between 0 and 2**32-1"))
    return number


def shard(value: Any, source: str) -> tuple[int, int]:
    """``K/N``: shard K of N, 1 <= K <= N."""
    text = str(value).strip()
    first, slash, second = text.partition("/")
    if not slash or not first.isdigit() or not second.isdigit():
        raise ValueError(_where(source, f"{value!r} is not K/N (shard K of N, e.g. 2/3)"))
    number, count = int(first), int(second)
    if not 1 <= number <= count:
        raise ValueError(_where(source, f"{value!r}: K must be between 1 and N"))
    return number, count
