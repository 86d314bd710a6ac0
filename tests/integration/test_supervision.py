"""Real children that pass, raise, crash, abort at exit, hang, and fork: classified right, nothing left alive."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import Pace, load_report, pid_alive, run_cli, run_pids, start_cli, wait_for

# Bounds of polls for facts (a file written, a process gone): reached only when something is broken.
FACT_TIMEOUT = 60.0
GONE_TIMEOUT = 30.0  # a SIGKILLed process disappears as soon as the kernel is done with it

CLASSIFY = '''
import lifeguard

@lifeguard.scenario(timeout=20)
def passes():
    assert sum(range(10)) == 45

@lifeguard.scenario(expect={"default": "failed@run"}, timeout=20)
def raises():
    raise RuntimeError("scenario says no")

@lifeguard.scenario(expect={"default": "crashed@run"}, timeout=20)
def segfaults_in_body():
    import ctypes
    ctypes.string_at(0)  # null read

@lifeguard.scenario(expect={"default": "crashed@exit"}, timeout=20)
def aborts_after_body():
    import atexit, os
    atexit.register(os.abort)

@lifeguard.scenario(expect={"default": "hung@run"}, timeout=HANG_DEADLINE)
def hangs_holding_the_gil():
    import ctypes
    # PyDLL keeps the GIL across the call: a native block no Python thread can interrupt.
    ctypes.PyDLL(None).sleep(1000)

@lifeguard.scenario(expect={"default": "hung@fork-child"}, timeout=HANG_DEADLINE)
def forked_child_hangs():
    import os, time
    pid = os.fork()
    if pid == 0:
        def stuck_in_forked_child():
            time.sleep(1000)
        stuck_in_forked_child()
        os._exit(0)
    os.waitpid(pid, 0)
'''


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory, pace: Pace) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("classify")
    path = tmp / "classify.py"
    # The hangs must be caught where they hang (the body, the forked child), never still starting.
    path.write_text(CLASSIFY.replace("HANG_DEADLINE", pace.deadline_text(2)))
    proc = run_cli("run", str(path), "--report", str(tmp / "report"), "-j", "2", "--no-native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = load_report(tmp / "report")
    return {run["scenario"]: run for run in report["runs"]}


@pytest.mark.parametrize(("name", "outcome", "phase"), [
    ("passes", "passed", None),
    ("raises", "failed", "run"),
    ("segfaults_in_body", "crashed", "run"),
    ("aborts_after_body", "crashed", "exit"),
    ("hangs_holding_the_gil", "hung", "run"),
    ("forked_child_hangs", "hung", "fork-child"),
])
def test_outcome_and_phase(classified: dict[str, dict], name: str, outcome: str, phase: str | None) -> None:
    run = classified[name]
    assert (run["outcome"], run["phase"]) == (outcome, phase)
    for pid in run_pids(run):
        assert not pid_alive(pid), f"{name}: pid {pid} survived its run"


def test_crash_details(classified: dict[str, dict]) -> None:
    assert classified["segfaults_in_body"]["signal_name"] == "SIGSEGV"
    assert "Segmentation fault" in classified["segfaults_in_body"]["stderr_tail"]
    assert classified["aborts_after_body"]["signal_name"] == "SIGABRT"
    assert "scenario says no" in classified["raises"]["reason"]


def test_hung_runs_carry_python_stacks(classified: dict[str, dict]) -> None:
    gil = classified["hangs_holding_the_gil"]
    assert any("hangs_holding_the_gil" in dump for dump in gil["python_stacks"].values())
    forked = classified["forked_child_hangs"]
    assert len(forked["python_stacks"]) == 2, forked["python_stacks"].keys()
    child_dumps = [d for pid, d in forked["python_stacks"].items() if "stuck_in_forked_child" in d]
    assert len(child_dumps) == 1, "the forked child's own stack must be captured"


def test_daemonized_grandchild_is_reported_and_killed(scenario_file, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    path = scenario_file(f'''
import lifeguard

@lifeguard.scenario(timeout=20)
def leaves_a_daemon():
    import os, time
    # The grandchild says it is set up through a pipe: the body returns only after that, however slowly it starts.
    ready_read, ready_write = os.pipe()
    if os.fork() == 0:
        os.close(ready_read)
        os.setsid()
        if os.fork() == 0:
            with open({str(pid_file)!r} + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
            os.write(ready_write, b"ready")
            time.sleep(1000)
        os._exit(0)
    os.close(ready_write)
    assert os.read(ready_read, 5) == b"ready", "the grandchild died before it was set up"
''')
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"), "--no-native")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    grandchild = int(pid_file.read_text())
    run = load_report(tmp_path / "r")["runs"][0]
    assert run["outcome"] == "failed" and run["phase"] == "exit"
    assert [p["pid"] for p in run["leftover_processes"]] == [grandchild]
    assert "left processes running" in proc.stdout
    _wait_for(lambda: not pid_alive(grandchild), "the leftover grandchild to be killed", timeout=GONE_TIMEOUT)


def _quick_then_hang(pid_file: Path) -> str:
    """A scenario file whose first series passes at once and whose second hangs (writing its pid first)."""
    return f'''
import lifeguard

@lifeguard.scenario(timeout=20)
def quick():
    pass

@lifeguard.scenario(expect={{"default": "hung"}}, timeout=60)
def hangs():
    import os, time
    with open({str(pid_file)!r} + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
    time.sleep(1000)
'''


def _start_supervisor(path: Path, report: Path, *options: str) -> subprocess.Popen[str]:
    return start_cli("run", str(path), "--report", str(report), "--no-native", *options, terminal_sigint=True)


def _wait_for(condition, what: str, timeout: float = FACT_TIMEOUT) -> None:  # type: ignore[no-untyped-def]
    wait_for(condition, what, timeout)


def test_results_jsonl_survives_sigkill_of_the_supervisor(scenario_file, tmp_path: Path) -> None:
    pid_file, report = tmp_path / "hung.pid", tmp_path / "r"
    path = scenario_file(_quick_then_hang(pid_file))
    supervisor = _start_supervisor(path, report, "-j", "1")
    hung_pid = None
    try:
        _wait_for(pid_file.exists, "the hanging run")
        hung_pid = int(pid_file.read_text())
        # -j 1 and interleaved series: quick#0 finished (and was written) before hangs#0 started.
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.communicate(timeout=10)
        lines = (report / "results.jsonl").read_text().splitlines()
        assert [json.loads(line)["scenario"] for line in lines] == ["quick"]
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.communicate(timeout=10)
        if hung_pid and pid_alive(hung_pid):
            os.kill(hung_pid, signal.SIGKILL)


@pytest.mark.parametrize(("jobs", "stop", "code"), [
    ("1", signal.SIGINT, 130), ("2", signal.SIGINT, 130),  # Ctrl-C
    ("1", signal.SIGTERM, 143), ("1", signal.SIGHUP, 129),  # CI cancelling the job; the terminal closing
])
def test_ctrl_c_kills_children_and_keeps_what_finished(scenario_file, tmp_path: Path, jobs: str,
                                                         stop: signal.Signals, code: int) -> None:
    pid_file, report = tmp_path / "hung.pid", tmp_path / "r"
    path = scenario_file(_quick_then_hang(pid_file))
    supervisor = _start_supervisor(path, report, "-j", jobs)
    hung_pid = None
    try:
        _wait_for(pid_file.exists, "the hanging run")
        hung_pid = int(pid_file.read_text())
        _wait_for(lambda: (report / "results.jsonl").exists() and (report / "results.jsonl").read_text(),
                  "the quick run's result")
        os.kill(supervisor.pid, stop)
        out, err = supervisor.communicate(timeout=30)
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.communicate(timeout=10)
        if hung_pid and pid_alive(hung_pid):  # the run leads its own process group: not in the one above
            os.kill(hung_pid, signal.SIGKILL)
    assert supervisor.returncode == code, out + err
    assert not pid_alive(hung_pid)
    data = load_report(report)
    assert data["interrupted"] is True
    assert data["all_expected"] is False  # what did not run proves nothing
    assert [r["scenario"] for r in data["runs"]] == ["quick"]
    # A CI page reading junit.xml must not show the session green.
    suite = ET.parse(report / "junit.xml").getroot()
    assert suite.get("errors") == "1"
    errors = [case for case in suite.iter("testcase") if case.find("error") is not None]
    assert [case.get("name") for case in errors] == ["session"]
    assert "interrupted after 1 finished run(s)" in errors[0].find("error").get("message")


def test_a_reused_report_folder_keeps_nothing_of_the_previous_session(tmp_path: Path) -> None:
    report = tmp_path / "r"
    first = run_cli("run", "--report", str(report), "--no-native", "-c", "import os; os.abort()")
    assert first.returncode == EXIT_LIFETIME, first.stdout + first.stderr
    assert [p.name for p in (report / "runs").iterdir()] == ["code-default-0"]
    second = run_cli("run", "--report", str(report), "--no-native", "-c", "pass")
    assert second.returncode == 0, second.stdout + second.stderr
    assert not (report / "runs").exists() or not any((report / "runs").iterdir())
    lines = (report / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in lines] == ["passed"]
    assert load_report(report)["all_expected"] is True


def test_a_report_folder_another_lifeguard_writes_is_refused(tmp_path: Path) -> None:
    report = tmp_path / "r"
    report.mkdir()
    with open(report / ".lifeguard.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running lifeguard holds it
        proc = run_cli("run", "--report", str(report), "--no-native", "-c", "pass")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "another lifeguard is writing this folder" in proc.stderr
    assert not (report / "results.jsonl").exists()


def test_fatal_python_error_is_a_crash(scenario_file, tmp_path: Path) -> None:
    path = scenario_file('''
import lifeguard

@lifeguard.scenario(expect={"default": "crashed@run"}, timeout=20)
def fatal():
    import ctypes
    ctypes.pythonapi.Py_FatalError(b"lifeguard test fatal error")
''')
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"), "--no-native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert "lifeguard test fatal error" in run["fatal_error"]


def test_corruption_report(scenario_file, tmp_path: Path) -> None:
    path = scenario_file('''
import lifeguard
from lifeguard import child

@lifeguard.scenario(expect={"default": "corrupted@run"}, timeout=20)
def broken_bytes():
    child.report_corruption("frame header mangled", data=b"\\x00\\xffAB")
''')
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"), "--no-native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert run["corruption"][0]["message"] == "frame header mangled"
    assert run["corruption"][0]["data_hex"] == "00ff4142"


def test_python_option_runs_another_interpreter(scenario_file, tmp_path: Path) -> None:
    from tests.helpers import pyenv_python

    other = pyenv_python("3.10") or pyenv_python("3.12")
    if other is None:
        pytest.skip("no second CPython installed")
    path = scenario_file('''
import lifeguard

@lifeguard.scenario(timeout=20)
def version():
    import sys
    print("child runs", sys.version_info[:2])
''')
    proc = run_cli("run", str(path), "--python", other, "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_report(tmp_path / "r")
    assert os.path.realpath(data["python"]["executable"]) == os.path.realpath(other)
    assert data["runs"][0]["python"] != ".".join(map(str, sys.version_info[:3]))
