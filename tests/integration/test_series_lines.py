"""Each series' line is printed as soon as that series has had its last run, not at the end of the session:
the second series waits for a file the test creates only once it has read the first series' line."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.helpers import ROOT, Pace, real_python


def test_a_series_line_comes_when_the_series_ends(scenario_file, tmp_path: Path, pace: Pace) -> None:
    go = tmp_path / "go"
    wait = pace.deadline(30)
    path = scenario_file(f"""
import os, time
import lifeguard

@lifeguard.scenario(repeat=1)
def first():
    pass

@lifeguard.scenario(repeat=2, timeout={wait * 2})
def second():
    deadline = time.monotonic() + {wait}
    while not os.path.exists({str(go)!r}):
        if time.monotonic() > deadline:
            raise SystemExit("the first series' line never came before this series ended")
        time.sleep(0.01)
""")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([real_python(), "-m", "lifeguard", "run", "-j", "1", "--no-native", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + wait * 3
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("ok   first[default]"):
                go.touch()
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=wait)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = "".join(seen)
    assert proc.returncode == 0, text + proc.stderr.read() if proc.stderr else text
    assert text.index("ok   first[default]") < text.index("ok   second[default]")
    assert text.count("ok   first[default]") == 1  # not again at the end
