"""Bounds that hold whatever the run does: its output is capped as it is written (never more than the cap
on disk, head and tail kept), and a hang of many processes ends within its deadline plus the capture budget."""

from __future__ import annotations

import os
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lifeguard.capture.bounded import run_bounded
from lifeguard.errors import EXIT_LIFETIME
from lifeguard.run.supervise import CAPTURE_BUDGET, DEFAULT_OUTPUT_CAP
from tests.helpers import ROOT, Pace, load_report, pid_alive, real_python, run_cli, wait_for

TWO_GB = 2 * 1024 ** 3
MARKER = "bytes of output dropped here]"


def test_two_gigabytes_of_stdout_never_take_more_than_the_cap_on_disk(tmp_path: Path, pace: Pace) -> None:
    script = tmp_path / "floods.py"
    script.write_text(f"""
import os, sys
os.write(1, b"FIRST LINE\\n")
block = b"x" * (1 << 20)
for _ in range({TWO_GB} // len(block)):
    os.write(1, block)
os.write(1, b"\\nLAST LINE\\n")
sys.exit(1)  # a failed run keeps its evidence folder
""")
    report = tmp_path / "r"
    largest = [0]
    stop = threading.Event()

    def watch() -> None:  # the size on disk while the child writes, not only at the end
        while not stop.is_set():
            for out in report.glob("runs/*/stdout.txt"):
                try:
                    largest[0] = max(largest[0], out.stat().st_size)
                except OSError:
                    pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = run_cli("run", "-q", "--report", str(report), "--no-native", "--timeout", pace.deadline_text(120),
                       str(script), timeout=pace.deadline(120) + 60)
    finally:
        stop.set()
        watcher.join(5)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    run = load_report(report)["runs"][0]
    assert run["outcome"] == "failed", run
    out = Path(run["run_dir"]) / "stdout.txt"
    size = out.stat().st_size
    assert size <= DEFAULT_OUTPUT_CAP + 200, size
    assert largest[0] <= DEFAULT_OUTPUT_CAP + 200, largest[0]
    with open(out, "rb") as f:
        head = f.read(64)
        f.seek(size - 64)
        tail = f.read()
    assert head.startswith(b"FIRST LINE\n")
    assert tail.endswith(b"LAST LINE\n")
    with open(out, "rb") as f:
        assert MARKER.encode() in f.read()


def test_a_hang_of_200_processes_ends_within_its_deadline_and_the_capture_budget(tmp_path: Path, pace: Pace) -> None:
    ready = tmp_path / "ready"
    script = tmp_path / "many.py"
    script.write_text(f"""
import os, time
for _ in range(199):
    if os.fork() == 0:
        time.sleep(1000)
        os._exit(0)
open({str(ready)!r}, "w").close()
time.sleep(1000)
""")
    report = tmp_path / "r"
    timeout = 5.0
    started = time.monotonic()
    done = run_cli("run", "-q", "--report", str(report), "--timeout", f"{timeout:g}", str(script),
                   timeout=timeout + CAPTURE_BUDGET + 120)
    took = time.monotonic() - started
    assert ready.exists(), done.stderr  # all 200 were up before the deadline
    assert done.returncode == EXIT_LIFETIME, done.stdout[-2000:] + done.stderr[-2000:]
    run = load_report(report)["runs"][0]
    assert run["outcome"] == "hung", run
    assert run["duration"] <= timeout + CAPTURE_BUDGET, run["duration"]
    # The whole command: the run, plus lifeguard's own start-up and the diagnosis of the evidence.
    assert took <= timeout + CAPTURE_BUDGET + 10 * pace.startup + 15, took


def _tool_started(pid_file: Path, pace: Pace) -> None:
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "the tool's first line",
             timeout=pace.deadline(30))


def _interrupted_tool_is_gone(pid_file: Path, pace: Pace, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_bounded with the interrupt its caller wired in: it passes the interrupt on and leaves no tool."""
    with pytest.raises(KeyboardInterrupt):
        run_bounded(["sh", "-c", f"echo $$ > {pid_file}; exec sleep {pace.deadline(60):g}"], pace.deadline(60))
    monkeypatch.undo()
    tool = int(pid_file.read_text())
    assert not pid_alive(tool)
    assert not Path(f"/proc/{tool}").exists()  # reaped too, not left a zombie


def test_an_interrupt_inside_popen_after_its_fork_leaves_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 pace: Pace) -> None:
    """A Ctrl-C that lands while Popen is still finishing (its child already started: on a loaded machine the
    tool may even have run its first line) is raised inside Popen.__init__, which returns no object to end the
    tool with. The moment cannot be hit on purpose with a real signal, so Popen's child start is wrapped here
    to raise KeyboardInterrupt right after the real fork and exec; the tool is a real process."""
    pid_file = tmp_path / "tool.pid"
    real_start = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def start_then_interrupt(self: subprocess.Popen[bytes], *args: Any, **kwargs: Any) -> None:
        real_start(self, *args, **kwargs)
        _tool_started(pid_file, pace)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "_execute_child", start_then_interrupt)
    _interrupted_tool_is_gone(pid_file, pace, monkeypatch)


def test_an_interrupt_as_the_fork_returns_leaves_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         pace: Pace) -> None:
    """A Ctrl-C handled the moment the fork returns, before Popen has stored the child's pid (the interpreter
    runs pending signal handlers right after a C call): no pid to kill. The fork is wrapped here to raise
    KeyboardInterrupt as it returns, the tool running; the tool is a real process."""
    pid_file = tmp_path / "tool.pid"
    real_fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]

    def fork_then_interrupt(*args: Any) -> int:
        real_fork_exec(*args)
        _tool_started(pid_file, pace)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "_fork_exec", fork_then_interrupt)
    _interrupted_tool_is_gone(pid_file, pace, monkeypatch)


def test_an_interrupt_as_the_tool_has_just_started_leaves_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  pace: Pace) -> None:
    """A Ctrl-C that lands once start_tool has returned but before run_bounded holds what it returned (seen once
    in a loaded run of the Ctrl-C test below: the tool alive after "interrupted"). start_tool is wrapped to raise
    KeyboardInterrupt as it returns, the tool running; the tool is a real process."""
    from lifeguard.capture import bounded

    pid_file = tmp_path / "tool.pid"
    real_start = bounded.start_tool

    def start_then_interrupt(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        real_start(argv, **popen)
        _tool_started(pid_file, pace)
        raise KeyboardInterrupt

    monkeypatch.setattr(bounded, "start_tool", start_then_interrupt)
    _interrupted_tool_is_gone(pid_file, pace, monkeypatch)


def test_ctrl_c_during_a_bounded_tool_run_kills_the_tool(tmp_path: Path, pace: Pace) -> None:
    """run_bounded starts a tool in a session of its own (the terminal's Ctrl-C never reaches it): interrupted
    while it waits, it kills the tool's group before passing the interrupt on."""
    pid_file = tmp_path / "tool.pid"
    script = textwrap.dedent(f"""
        import os, signal, threading, time
        from lifeguard.capture.bounded import run_bounded

        # A background job of a non-interactive shell (a CI step, `cmd &`) starts with SIGINT ignored, and Python
        # keeps it ignored: the Ctrl-C this test sends would never land.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupt_once_started():
            while not os.path.exists({str(pid_file)!r}) or not open({str(pid_file)!r}).read().strip():
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_once_started, daemon=True).start()
        try:
            run_bounded(["sh", "-c", "echo $$ > {pid_file}; exec sleep {pace.deadline(60):g}"], {pace.deadline(60):g})
        except KeyboardInterrupt:
            print("interrupted")
    """)
    done = subprocess.run([real_python(), "-c", script], capture_output=True, text=True, timeout=pace.deadline(60),
                          stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.stdout.strip() == "interrupted", done.stdout + done.stderr
    assert not pid_alive(int(pid_file.read_text()))
