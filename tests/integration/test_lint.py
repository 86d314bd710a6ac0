"""The code stays ruff-clean and type-checks (mypy), as part of the suite CI runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT

LINT_TIMEOUT = 300


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=LINT_TIMEOUT, stdin=subprocess.DEVNULL, check=False)


def test_ruff_clean() -> None:
    proc = _run("ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (the test extra has it; a free-threaded interpreter's "
                           "test-freethreaded extra cannot build it)")
def test_mypy_strict_clean() -> None:
    # The settings ([tool.mypy] in pyproject.toml: strict, and why gdb_script.py is left out) live in one place.
    proc = _run("mypy", "lifeguard")
    assert "strict = true" in (ROOT / "pyproject.toml").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
