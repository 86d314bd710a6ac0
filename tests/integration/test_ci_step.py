"""A CI step under guard: `lifeguard run -m pytest ...` (or `-- pytest ...`) shows pytest's own output, exits
with pytest's own code when nothing lifetime-related happened, and fails with lifeguard's outcome, phase,
stacks and findings, and its own exit code (EXIT_LIFETIME), when pytest crashes or hangs after its summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import Pace, load_report, pid_alive, real_python, run_cli, run_pids

pytestmark = pytest.mark.timeout(240)

HANG_AT_LEAST = 4.0
# The inner pytest: quiet, nothing written into the suite's folder, none of the outer session's plugins.
PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:lifeguard", "tests")


def suite(folder: Path, conftest: str = "", failing: bool = False) -> Path:
    tests = folder / "tests"
    tests.mkdir()
    (tests / "test_small.py").write_text("def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    pass\n"
                                         + ("\ndef test_bad():\n    assert 1 == 2\n" if failing else ""))
    if conftest:
        (tests / "conftest.py").write_text(conftest)
    return folder


def only_run(report: Path) -> dict[str, Any]:
    runs = load_report(report)["runs"]
    assert len(runs) == 1
    return dict(runs[0])


def test_a_clean_suite_gives_pytests_output_and_its_zero(tmp_path: Path) -> None:
    suite(tmp_path)
    proc = run_cli("run", "-m", "pytest", *PYTEST_ARGS, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and "ok   pytest[default]" in proc.stdout


def test_failed_tests_give_pytests_own_exit_code(tmp_path: Path) -> None:
    suite(tmp_path, failing=True)
    pytest_script = str(Path(real_python()).parent / "pytest")
    proc = run_cli("run", "--report", str(tmp_path / "r"), "--", pytest_script, *PYTEST_ARGS, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # pytest's 1: tests failed, nothing else
    assert "1 failed, 2 passed" in proc.stdout and "exited with code 1 on its own" in proc.stdout
    # pytest's verdict, not an unexpected one of lifeguard's: a CI log's last line says so.
    last = proc.stdout.rstrip().splitlines()[-1]
    assert "the program's own exit code 1, nothing lifetime-related" in last, proc.stdout
    assert "unexpected" not in proc.stdout and not any(line.startswith("FAIL ") for line in proc.stdout.splitlines())
    run = only_run(tmp_path / "r")
    assert (run["outcome"], run["exit_code"], run["signal"]) == ("failed", 1, None)


def test_a_suite_that_passes_then_crashes_at_exit(tmp_path: Path) -> None:
    suite(tmp_path, conftest="import atexit, os\n\natexit.register(os.abort)  # after the summary: SIGABRT\n")
    report = tmp_path / "r"
    proc = run_cli("run", "--report", str(report), "-m", "pytest", *PYTEST_ARGS, cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr  # not pytest's 1 for failed tests
    assert "2 passed" in proc.stdout  # pytest's summary, live, before the crash
    assert f"a lifetime problem (exit code {EXIT_LIFETIME})" in proc.stdout.rstrip().splitlines()[-1]
    run = only_run(report)
    assert (run["outcome"], run["phase"], run["signal_name"]) == ("crashed", "exit", "SIGABRT"), run["reason"]
    crashed = [p for p in run["backtraces"] if p["signal"]]
    assert crashed, run["notes"]
    native = [f["function"] or "" for p in crashed for t in p["threads"] for f in t["frames"] if not f["is_python"]]
    assert "abort" in native and any("atexit" in name for name in native), native
    assert "crashed@exit (SIGABRT)" in proc.stdout and run["findings"]
    assert not list(tmp_path.rglob("core*"))


HANGS_AT_EXIT = """
import threading

stop = threading.Event()
# A non-daemon thread nobody stops: pytest prints its summary, then the interpreter waits for it at exit.
threading.Thread(target=stop.wait, name="forgotten-worker").start()
"""


def test_a_suite_that_hangs_at_exit(tmp_path: Path, pace: Pace) -> None:
    suite(tmp_path, conftest=HANGS_AT_EXIT)
    report = tmp_path / "r"
    proc = run_cli("run", "--timeout", pace.deadline_text(HANG_AT_LEAST), "--report", str(report), "-m", "pytest",
                   *PYTEST_ARGS, cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    run = only_run(report)
    assert (run["outcome"], run["phase"]) == ("hung", "exit"), run["reason"]
    (process,) = run["backtraces"]
    python = {t["tid"]: [f["function"] for f in t["frames"] if f["is_python"]] for t in process["threads"]}
    # The main thread waits in threading._shutdown for the worker, which waits on its event.
    assert "_shutdown" in python[process["pid"]], python
    assert any("wait" in frames and "_shutdown" not in frames for frames in python.values()), python
    waiting = [f for f in run["findings"] if f["kind"] == "exit-waits-for-thread"]
    assert waiting and "threading._shutdown" in waiting[0]["summary"], run["findings"]
    for pid in run_pids(run):
        assert not pid_alive(pid)
