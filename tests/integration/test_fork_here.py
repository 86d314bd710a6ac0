"""A run forked from the process that supervises it (lifeguard.run.fork_here, the plugin's fork mode), seen from
the supervisor's side: real forks, real pipes, the run's output in its files. Each case runs in a process of
its own, set up as the plugin sets up pytest's (the harness snapshot), never in this test process: a fork of
it would run its atexit callbacks at the child's exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lifeguard.child.protocol import STDOUT_FILE
from tests.helpers import ROOT

# Far above a forked child's life (milliseconds) and a Python start-up; only a broken fork waits this long.
RUN_TIMEOUT = 60.0
PROCESS_TIMEOUT = 2 * RUN_TIMEOUT

PUMP_AFTER_MEANWHILE = """
import gc, json, os, sys, threading
from pathlib import Path

from lifeguard.child import forked_test
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.pytest_plugin.verdicts import interpreter
from lifeguard.run.fork_here import run_in_fork

forked_test.snapshot_harness()
threads_meanwhile = []


def body():
    os.write(1, b"written at once\\n")
    gc.unfreeze()  # the inherited objects, frozen as the child starts, are the collector's to list again
    inherited = [o for o in gc.get_objects() if isinstance(o, threading.Thread) and o.name == "lifeguard-relay"]
    os.write(1, f"relay threads inherited: {{len(inherited)}}\\n".encode())
    return 0


def meanwhile():
    threads_meanwhile.append([t.name for t in threading.enumerate()])


run_dir = Path(sys.argv[1])
spec = RunSpec(scenario="fork-here", variant="default", index=0, kind=RunKind.FUNCTION, path=__file__,
               function="body", code=None, interpreter=interpreter(), timeout={timeout}, run_dir=run_dir,
               expected="passed", mode=StartMode.PYTEST_FORK, cores=False)
result = run_in_fork(spec, body, meanwhile=meanwhile)
print(json.dumps({{"outcome": result.outcome.value, "reason": result.reason, "threads": threads_meanwhile}}))
"""


def test_the_output_pump_starts_after_the_callers_own_work(tmp_path: Path) -> None:
    """The caller's work done as the child starts (``meanwhile``) runs with no pump thread yet: started with the
    child, it took the child's core for a few hundred microseconds of every forked test's start. What the
    child wrote meanwhile waits in the pipe and still reaches the run's files. Nor is the pump's thread object
    made before the fork: the child's at-fork step resets every thread object it inherits."""
    script = tmp_path / "supervisor.py"
    script.write_text(PUMP_AFTER_MEANWHILE.format(timeout=RUN_TIMEOUT))
    run_dir = tmp_path / "run-1"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(script), str(run_dir)], env=env, capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["outcome"] == "passed", seen["reason"]
    assert seen["threads"] and "lifeguard-relay" not in seen["threads"][0], seen["threads"]
    output = (run_dir / STDOUT_FILE).read_text()
    assert "written at once" in output
    # Nor is its thread object made before the fork: every forked child's at-fork step resets each one it has.
    assert "relay threads inherited: 0" in output, output
