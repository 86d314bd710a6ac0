"""The code stays ruff-clean and type-checks (mypy), as part of the suite CI runs."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

LINT_TIMEOUT = 300


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=LINT_TIMEOUT, stdin=subprocess.DEVNULL, check=False)


def test_ruff_clean() -> None:
    proc = _run("ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    # gdb_script.py runs inside gdb's own Python, against gdb's module: not checkable here.
    proc = _run("mypy", "lifeguard", "--ignore-missing-imports", "--exclude", "gdb_script")
    assert proc.returncode == 0, proc.stdout + proc.stderr
