"""pytest --lifeguard --pdb on a real pseudo-terminal: the debugger stops in the failing test's own frame
(pytest's process runs unmarked tests itself then, and says so in one header line), not in lifeguard's."""

from __future__ import annotations

import os
import pty
import subprocess
import time
from pathlib import Path

from tests.helpers import ROOT, Pace, read_terminal, real_python

FAILING = "def test_x():\n    value = 1\n    assert value == 2\n"


def _read_until(master: int, marker: bytes, seen: bytearray, deadline: float) -> bool:
    while marker not in seen and time.monotonic() < deadline:
        chunk = read_terminal(master, 0.1)
        if chunk is None:  # the terminal's other end closed: pytest has exited
            break
        seen += chunk
    return marker in seen


def test_pdb_stops_in_the_tests_own_frame(tmp_path: Path, pace: Pace) -> None:
    (tmp_path / "test_pdb.py").write_text(FAILING)
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm", NO_COLOR="1")
    proc = subprocess.Popen([real_python(), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--lifeguard",
                             "--pdb", "test_pdb.py"], cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    seen = bytearray()
    try:
        prompted = _read_until(master, b"(Pdb)", seen, time.monotonic() + pace.deadline(60))
        text = seen.decode(errors="replace")
        assert prompted, text
        assert "lifeguard: --pdb: unmarked tests run in pytest's process" in text
        stop = text[text.rindex("PDB post_mortem"):]
        assert "test_pdb.py(3)test_x()" in stop and "-> assert value == 2" in stop, stop
        assert "lifeguard/" not in stop, stop
        os.write(master, b"c\n")
        _read_until(master, b"1 failed", seen, time.monotonic() + pace.deadline(60))
        assert proc.wait(timeout=pace.deadline(60)) == 1, seen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
        os.close(master)
