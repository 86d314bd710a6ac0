"""The static_destructor fixture through the CLI: the buggy pool crashes at exit, the fixed one passes.

The onnxruntime OrtTorchFunctionPool incident: a C++ static singleton releases
Python callables from exit(), after Py_Finalize. Each supported interpreter runs
every scenario of scenarios/static_destructor.py a few times in both variants.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_report, pyenv_python, run_cli

SCENARIO_FILE = ROOT / "scenarios" / "static_destructor.py"
SCENARIOS = {"pool_outlives_interpreter", "function_called_before_exit", "closures_released_after_finalize"}
REPEAT = 3
VERSIONS = ("3.10", "3.11", "3.12", "3.13")
# The deleter's Py_DECREF after finalization either dereferences the missing
# thread state (SIGSEGV) or meets a trashcan that asks for it (fatal error, SIGABRT).
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT}
NO_THREAD_STATE = "PyThreadState_Get: the function must be called with the GIL held"


@pytest.fixture(scope="module", params=VERSIONS)
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """report.json of every static_destructor scenario, both variants, under one Python version."""
    python = pyenv_python(request.param)
    if python is None:
        pytest.skip(f"no CPython {request.param} installed")
    report_dir = tmp_path_factory.mktemp(f"static-destructor-{request.param}")
    proc = run_cli("run", str(SCENARIO_FILE), "--python", python, "--repeat", str(REPEAT),
                   "--report", str(report_dir))
    assert (Path(report_dir) / "report.json").exists(), proc.stdout + proc.stderr
    loaded = load_report(Path(report_dir))
    loaded["cli_exit_code"] = proc.returncode
    loaded["cli_output"] = proc.stdout + proc.stderr
    return loaded


def _runs(report: dict, variant: str, scenario: str | None = None) -> list[dict]:
    return [run for run in report["runs"]
            if run["variant"] == variant and (scenario is None or run["scenario"] == scenario)]


def test_every_verdict_is_expected(report: dict) -> None:
    assert report["cli_exit_code"] == 0, report["cli_output"]
    assert {run["scenario"] for run in report["runs"]} == SCENARIOS
    assert len(report["runs"]) == len(SCENARIOS) * 2 * REPEAT


def test_buggy_pool_crashes_in_exit_phase(report: dict) -> None:
    for run in _runs(report, "buggy"):
        where = f"{run['scenario']}[buggy] #{run['index']}: {run['reason']}"
        assert run["outcome"] == "crashed", where
        assert run["phase"] == "exit", where
        assert run["signal"] in CRASH_SIGNALS, where
        if run["signal"] == signal.SIGABRT:
            assert NO_THREAD_STATE in (run["fatal_error"] or ""), where


def test_fixed_pool_passes(report: dict) -> None:
    for run in _runs(report, "fixed"):
        where = f"{run['scenario']}[fixed] #{run['index']}: {run['reason']}\n{run['stderr_tail']}"
        assert run["outcome"] == "passed", where
        assert run["exit_code"] == 0, where


def test_closures_take_the_incidents_path(report: dict) -> None:
    """func_dealloc -> tupledealloc: the trashcan's PyThreadState_Get aborts on 3.10 and 3.11;
    3.12+ segfaults earlier, when func_dealloc looks up the interpreter for function watchers."""
    runs = _runs(report, "buggy", "closures_released_after_finalize")
    assert runs
    for run in runs:
        major, minor = (int(part) for part in run["python"].split(".")[:2])
        if (major, minor) < (3, 12):
            assert run["signal"] == signal.SIGABRT, run["reason"]
            assert "Fatal Python error: " + NO_THREAD_STATE in run["stderr_tail"], run["stderr_tail"]
        else:
            assert run["signal"] == signal.SIGSEGV, run["reason"]
