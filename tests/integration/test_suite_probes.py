"""Test-suite probes on a library's own suite: tests/integration/fixtures_native/suite_bugs, buggy and fixed.

The library has one lifetime bug per probe, each in an object its own tests make with arguments (see its
header); every test passes in a plain pytest run of either build. Under ``pytest --lifeguard --lifeguard-probe
P`` the buggy build fails exactly the tests whose objects reach P's bug, with the probe named, and the fixed
build passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lifeguard.build import build_fixture
from lifeguard.interpreter import resolve
from tests.helpers import Pace, load_report, real_python

SUITE = Path(__file__).parent / "fixtures_native" / "suite_bugs" / "suite"
TESTS = "test_suite_bugs.py::"
# Per probe: the tests the buggy build fails, with outcome@phase. A hang waits for the test's deadline.
BUGGY: dict[str, dict[str, str]] = {
    "fork-finalize": {"test_stream_checksum": "hung@fork-child"},
    "fork-rerun": {"test_square_all": "hung@fork-child"},
    "gc-thread": {"test_context_counts_submissions": "hung@run", "test_graph_degrees": "crashed@run",
                  "test_graph_copy_is_independent": "crashed@run"},
    "gc-cycle": {"test_graph_degrees": "crashed@run", "test_graph_copy_is_independent": "crashed@run"},
}
DEADLINE_AT_LEAST = 6.0  # each test's: its run plus its probe's (a second run of it, a fork, a collection)


@pytest.fixture(scope="module")
def builds() -> dict[str, Path]:
    near = Path(__file__).parent
    return {variant: build_fixture("suite_bugs", variant, resolve(), near=near).directory
            for variant in ("buggy", "fixed")}


def _suite(tmp_path: Path, build: Path, *options: str, timeout: float) -> tuple[subprocess.CompletedProcess[str],
                                                                                 dict[str, dict[str, Any]]]:
    """The suite under pytest with ``options``, in a copy of its folder; each test's run in lifeguard's report."""
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite, dirs_exist_ok=True)
    report = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(build)}
    argv = [real_python(), "-m", "pytest", "-q", "-p", "no:randomly", *options]
    if "--lifeguard" in options:
        argv += ["--lifeguard-timeout", f"{timeout:g}", "--lifeguard-report", str(report)]
    proc = subprocess.run(argv, cwd=suite, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=timeout * 8 + 120)
    runs = {run["scenario"].removeprefix(TESTS): run for run in load_report(report)["runs"]} \
        if (report / "report.json").exists() else {}
    return proc, runs


@pytest.mark.parametrize("variant", ["buggy", "fixed"])
def test_every_test_passes_plainly(tmp_path: Path, builds: dict[str, Path], variant: str) -> None:
    proc, _ = _suite(tmp_path, builds[variant], timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "16 passed, 1 skipped" in proc.stdout, proc.stdout


@pytest.mark.parametrize("probe", sorted(BUGGY))
def test_each_probe_fails_the_tests_that_reach_its_bug(tmp_path: Path, builds: dict[str, Path], pace: Pace,
                                                       probe: str) -> None:
    timeout = pace.deadline(DEADLINE_AT_LEAST)
    proc, runs = _suite(tmp_path / "buggy", builds["buggy"], "--lifeguard", "--lifeguard-probe", probe,
                        timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    failed = {test: f"{run['outcome']}@{run['phase']}" for test, run in runs.items() if run["outcome"] != "passed"}
    assert failed == BUGGY[probe], output
    for test in failed:
        assert any(note.startswith(f"{probe} probe failed: the test passed") for note in runs[test]["notes"]), \
            runs[test]["notes"]
        assert f"FAILED {TESTS}{test}" in proc.stdout, proc.stdout
    applied = [test for test, run in runs.items() if any(n.startswith(f"{probe} probe: ") for n in run["notes"])]
    assert len(applied) >= 3, runs  # the probe did something after the other tests too, and says what
    proc, runs = _suite(tmp_path / "fixed", builds["fixed"], "--lifeguard", "--lifeguard-probe", probe,
                        timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {run["outcome"] for run in runs.values()} == {"passed"}, proc.stdout


def test_a_probe_needs_group_mode(tmp_path: Path, builds: dict[str, Path]) -> None:
    proc, _ = _suite(tmp_path, builds["fixed"], "--lifeguard", "--lifeguard-mode", "fork", "--lifeguard-probe",
                     "gc-cycle", timeout=30)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--lifeguard-probe gc-cycle needs --lifeguard in group mode" in proc.stderr
