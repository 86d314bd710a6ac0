"""Shared helpers: every test that starts processes bounds them and checks none survive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
CLI_TIMEOUT = 120.0


def real_python() -> str:
    """The interpreter running the tests, as it was started: in a venv, the venv's link
    (the real binary behind it would lose the venv's packages). Never a shell shim:
    sys.executable is what the interpreter reports of itself."""
    return sys.executable


def pyenv_python(version: str) -> str | None:
    """An installed CPython of ``version`` (e.g. "3.10"), or None."""
    root = Path(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))) / "versions"
    if root.is_dir():
        for candidate in sorted(root.glob(f"{version}.*"), reverse=True):
            exe = candidate / "bin" / "python"
            if exe.exists():
                return str(exe)
    for name in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if os.path.exists(name):
            return name
    return None


def run_cli(*args: str, timeout: float = CLI_TIMEOUT, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m lifeguard ARGS` in a bounded child (its own session, killed whole on timeout)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    proc = subprocess.Popen([real_python(), "-m", "lifeguard", *args], cwd=cwd or ROOT, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(5)
        raise AssertionError(f"lifeguard {' '.join(args)} did not finish in {timeout} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def load_report(directory: Path) -> dict:
    return json.loads((directory / "report.json").read_text())


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def run_pids(run: dict) -> set[int]:
    """Every pid a run's child reported on its result channel (main and forked)."""
    pids = set()
    from lifeguard.run.supervise import EVENTS_FILE, read_events

    for event in read_events(Path(run["run_dir"]) / EVENTS_FILE):
        pids.add(event["pid"])
    for event in run.get("events", []):
        pids.add(event["pid"])
    return pids


@pytest.fixture
def scenario_file(tmp_path: Path):
    """Write a scenario file from source text; returns its path."""

    def write(source: str, name: str = "scenario_under_test.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write
