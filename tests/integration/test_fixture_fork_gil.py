"""The fork_gil fixture through the CLI: buggy runs fail the incident's way, fixed runs pass.

The MXNet CustomOperator incident, three cases: os.fork() while a worker still
has a Python callback to run (deadlock), the pool stopped by a C++ static
destructor after Py_Finalize (crash at exit), a callback on a native thread
with no thread state (crash). Two interpreters whose deadlock shapes differ:
up to 3.12 the worker waits for the GIL itself, on 3.13 already for the
thread-state list lock that PyOS_BeforeFork holds across fork().
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_report, pid_alive, pyenv_python, run_cli, run_pids

SCENARIO_FILE = ROOT / "scenarios" / "fork_gil.py"
VERSIONS = ("3.11", "3.13")
REPEAT = 2
# Two hung fork runs of 5 s each plus their gdb capture, builds on a cold
# cache and a dozen fast runs: generous, and below pytest's own 300 s.
FORK_GIL_CLI_TIMEOUT = 240.0

BUGGY = {
    "fork_with_pending_callback": ("hung", "run"),
    "exit_with_pending_callback": ("crashed", "exit"),
    "callback_on_unregistered_thread": ("crashed", "run"),
}
# Where the hung fork run's worker waits, by version (see the module docstring).
WORKER_WAITS_IN = {"3.11": "take_gil", "3.13": "new_threadstate"}


@pytest.fixture(scope="module", params=VERSIONS)
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """report.json of every fork_gil scenario, both variants, under one Python version."""
    python = pyenv_python(request.param)
    if python is None:
        pytest.skip(f"no CPython {request.param} installed")
    report_dir = tmp_path_factory.mktemp(f"fork-gil-{request.param}")
    proc = run_cli(
        "run",
        str(SCENARIO_FILE),
        "--python",
        python,
        "--repeat",
        str(REPEAT),
        "--report",
        str(report_dir),
        timeout=FORK_GIL_CLI_TIMEOUT,
    )
    assert (report_dir / "report.json").exists(), proc.stdout + proc.stderr
    loaded = load_report(Path(report_dir))
    loaded["cli_exit_code"] = proc.returncode
    loaded["cli_output"] = proc.stdout + proc.stderr
    loaded["version"] = request.param
    return loaded


def _runs(report: dict, variant: str, scenario: str) -> list[dict]:
    return [run for run in report["runs"] if run["variant"] == variant and run["scenario"] == scenario]


def _functions(run: dict) -> list[str]:
    return [
        frame["function"] or ""
        for process in run.get("backtraces") or []
        for thread in process["threads"]
        for frame in thread["frames"]
    ]


def test_every_verdict_is_expected(report: dict) -> None:
    assert report["cli_exit_code"] == 0, report["cli_output"]
    assert {run["scenario"] for run in report["runs"]} == set(BUGGY)
    assert len(report["runs"]) == len(BUGGY) * 2 * REPEAT


@pytest.mark.parametrize("scenario", sorted(BUGGY))
def test_buggy_variant_fails_like_the_incident(report: dict, scenario: str) -> None:
    outcome, phase = BUGGY[scenario]
    runs = _runs(report, "buggy", scenario)
    assert len(runs) == REPEAT
    for run in runs:
        where = f"{scenario}[buggy] #{run['index']} on {report['version']}: {run['reason']}"
        assert (run["outcome"], run["phase"]) == (outcome, phase), where
        if outcome == "crashed":
            assert run["signal"] == signal.SIGSEGV, where


@pytest.mark.parametrize("scenario", sorted(BUGGY))
def test_fixed_variant_passes(report: dict, scenario: str) -> None:
    runs = _runs(report, "fixed", scenario)
    assert len(runs) == REPEAT
    for run in runs:
        assert run["outcome"] == "passed", f"{scenario}[fixed] #{run['index']}: {run['reason']}"


def test_fork_deadlock_shows_prepare_handler_and_worker(report: dict) -> None:
    captured = [run for run in _runs(report, "buggy", "fork_with_pending_callback") if run.get("backtraces")]
    assert captured, "no hung fork run has native backtraces"
    functions = _functions(captured[0])
    for name in (
        "CallbackPool::PrepareForkHandler",
        "std::thread::join",
        "PyGILState_Ensure",
        WORKER_WAITS_IN[report["version"]],
    ):
        assert any(name in function for function in functions), f"{name} not in the backtraces"


def test_no_process_survives(report: dict) -> None:
    # The hung parent and, for the fixed variant, the child it forked.
    for run in report["runs"]:
        alive = sorted(pid for pid in run_pids(run) if pid_alive(pid))
        assert not alive, f"{run['scenario']}[{run['variant']}] #{run['index']} left {alive}"
