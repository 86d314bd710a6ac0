"""The progress line on a real pseudo-terminal: it moves while a run is in flight (a hang shows its seconds
passing) and every redraw erases the line it writes over, so a shorter line leaves nothing behind."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import time
from pathlib import Path

from tests.helpers import ROOT, Pace, read_terminal, real_python

PROGRESS = re.compile(r"runs (\d+)/(\d+)  unexpected \d+  [\d.]+ runs/s  (\d+)s")


def test_the_progress_line_moves_through_a_slow_run_and_erases_what_it_covers(tmp_path: Path, pace: Pace) -> None:
    go = tmp_path / "go"
    scenario = tmp_path / "slow.py"
    scenario.write_text(f"""
import os, time
import lifeguard


@lifeguard.scenario(repeat=2, timeout={pace.deadline(150)})
def slow():
    deadline = time.monotonic() + 120
    while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
        time.sleep(0.01)
""")
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm", NO_COLOR="1")
    proc = subprocess.Popen([real_python(), "-m", "lifeguard", "run", "--no-native", str(scenario)],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    output = b""
    seconds: set[int] = set()
    try:
        deadline = time.monotonic() + pace.deadline(120)
        while time.monotonic() < deadline:
            chunk = read_terminal(master, 0.1)
            if chunk is None:  # the terminal's other end closed: lifeguard has exited
                break
            output += chunk
            if not go.exists():
                seconds = {int(m.group(3)) for m in PROGRESS.finditer(output.decode(errors="replace"))
                           if m.group(1) == "0"}
                if len(seconds) >= 2:  # redrawn with time passing while the first run is still in flight
                    go.touch()
        assert proc.wait(timeout=pace.deadline(60)) == 0, output.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
        os.close(master)
    text = output.decode(errors="replace")
    assert len(seconds) >= 2, text
    carriage_returns = [m.start() for m in re.finditer("\r", text.replace("\r\n", "\n"))]
    assert carriage_returns and all(text.replace("\r\n", "\n")[i + 1:i + 4] == "\x1b[K" for i in carriage_returns)
