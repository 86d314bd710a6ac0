"""Fixtures for both layers: tests/unit/ (pure logic, no process) and tests/integration/ (real processes).

Helpers that start processes live in tests/helpers.py; every test that starts processes bounds them and
checks none survive.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import Pace, measure_pace


@pytest.fixture(scope="session")
def pace() -> Pace:
    """This machine's start-up time, measured once per session (by starting a few children, so only
    integration tests ask for it): every deadline a test sets is derived from it."""
    return measure_pace()


@pytest.fixture
def scenario_file(tmp_path: Path) -> Callable[..., Path]:
    """Write a scenario file from source text; returns its path."""

    def write(source: str, name: str = "scenario_under_test.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write
