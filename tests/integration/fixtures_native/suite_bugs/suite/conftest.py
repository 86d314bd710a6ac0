"""Fixtures of suite_bugs' test suite.

The suite is a project of its own (pytest.ini beside this file). lifeguard's own test run walks into this folder
too (tests/integration/ is in its testpaths), without the extension on its path: that run leaves it alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.inipath is None or config.inipath.parent != HERE:
        return True  # another project's run (lifeguard's): not this suite's
    return None


@pytest.fixture
def numbers() -> list[int]:
    """Negative, zero and positive ints, a fresh list for each test."""
    return list(range(-20, 21))


@pytest.fixture
def payload() -> bytes:
    """A few kilobytes in which no two neighbouring bytes are alike."""
    return bytes(range(256)) * 16
