"""What the benchmarks share: the trivial scenario they run (it measures lifeguard, not the body), and a
program's wall time seen at once."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BODY = "x = sum(range(100))"
SCENARIO = f'''
import lifeguard

@lifeguard.scenario(timeout=30, fork_server=True)
def trivial():
    {BODY}
'''


def write_scenario(folder: Path) -> Path:
    path = folder / "trivial.py"
    path.write_text(SCENARIO)
    return path


def timed(argv: list[str], env: dict[str, str] | None = None, *, timeout: float = 120.0, **popen: Any) -> float:
    """One program's wall time, its end seen on a pidfd at once. (subprocess.run(timeout=...) polls with
    sleeps growing to 50 ms: a 1 s program's end would be seen up to 50 ms late, in steps, which hid any
    difference smaller than a step.) Raises if it fails or outlives ``timeout``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **popen)
    pidfd = os.pidfd_open(proc.pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    took = time.perf_counter() - start
    if not ready:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{argv[0]} did not exit within {timeout} s")
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(argv)} failed")
    return took
