"""The one set of validators behind the CLI, the plugin's options and marker, the fixture and @scenario:
each value checked the same way, each message starting with where the value came from."""

from __future__ import annotations

import re

import pytest

from lifeguard.model.validate import SEED_LIMIT, positive_count, positive_seconds, seed


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (0.25, 0.25), ("2.5", 2.5), ("1e-3", 0.001)])
def test_positive_seconds_accepts(value: object, expected: float) -> None:
    assert positive_seconds(value, "timeout from marker on test_x") == expected


@pytest.mark.parametrize(("value", "message"), [
    ("soon", "'soon' is not a number of seconds"),
    (None, "None is not a number of seconds"),
    (True, "True is not a number of seconds"),
    (0, "0 must be a positive number of seconds"),
    (-1.5, "-1.5 must be a positive number of seconds"),
    ("inf", "'inf' must be a positive number of seconds"),
    (float("nan"), "nan must be a positive number of seconds"),
])
def test_positive_seconds_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^--timeout from command line: {re.escape(message)}$"):
        positive_seconds(value, "--timeout from command line")


@pytest.mark.parametrize(("value", "expected"), [(1, 1), ("12", 12), (" 3 ", 3)])
def test_positive_count_accepts(value: object, expected: int) -> None:
    assert positive_count(value, "repeat") == expected


@pytest.mark.parametrize(("value", "message"), [
    (1.5, "1.5 is not a whole number"),
    (2.0, "2.0 is not a whole number"),  # a float is refused even when whole: it was not meant as a count
    (True, "True is not a whole number"),
    ("lots", "'lots' is not a whole number"),
    ("2.5", "'2.5' is not a whole number"),
    (0, "0 must be at least 1"),
    ("-3", "'-3' must be at least 1"),
])
def test_positive_count_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^lifeguard_repeat from ini file: {re.escape(message)}$"):
        positive_count(value, "lifeguard_repeat from ini file")


def test_an_empty_source_gives_the_problem_alone() -> None:
    """argparse names the option itself, so the CLI passes no source."""
    with pytest.raises(ValueError, match=r"^'x' is not a whole number$"):
        positive_count("x", "")


@pytest.mark.parametrize(("value", "expected"), [(0, 0), ("42", 42), ("0x10", 16), (SEED_LIMIT - 1, 2**32 - 1)])
def test_seed_accepts(value: object, expected: int) -> None:
    assert seed(value, "--seed") == expected


@pytest.mark.parametrize(("value", "message"), [
    (SEED_LIMIT, f"{SEED_LIMIT} must be between 0 and 2**32-1"),
    (-1, "-1 must be between 0 and 2**32-1"),
    ("seven", "'seven' is not a whole number"),
    (1.0, "1.0 is not a whole number"),
    (False, "False is not a whole number"),
])
def test_seed_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^--seed: {re.escape(message)}$"):
        seed(value, "--seed")
