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


SLOW_READ_OF_A_CRASH = """
import ctypes, json, sys, time
from pathlib import Path

from lifeguard.child import crash_park, forked_test
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.pytest_plugin.verdicts import interpreter
from lifeguard.run.fork_here import run_in_fork

forked_test.snapshot_harness()
crash_park.prepare()
reads = []


def body():
    ctypes.string_at(0)  # SIGSEGV at once: it parks (the spec has cores on) until its stacks are read
    return 0


def slow_read(context):
    # Stands in for a stack reader slower than the test's deadline (gdb on a loaded machine): the real reader's
    # time cannot be made to pass a deadline on purpose. Nothing else of the run is a stand-in.
    reads.append(context.pids)
    time.sleep({read})
    return []


spec = RunSpec(scenario="slow-read", variant="default", index=0, kind=RunKind.FUNCTION, path=__file__,
               function="body", code=None, interpreter=interpreter(), timeout={timeout}, run_dir=Path(sys.argv[1]),
               expected="passed", mode=StartMode.PYTEST_FORK, cores=True)
result = run_in_fork(spec, body, capture_hooks=(slow_read,))
print(json.dumps({{"outcome": result.outcome.value, "reason": result.reason, "reads": len(reads),
                  "duration": result.duration}}))
"""


def test_a_crash_read_past_its_deadline_is_a_crash_not_a_hang(tmp_path: Path) -> None:
    """A forked test that crashes at once and parks, read by a reader that outlasts the test's deadline, then
    sent its signal back: it is dying of that signal (its core being written), not hanging. It read as hung at
    the deadline before (seen on CPython 3.14, where gdb's read is slower than a 3 s deadline)."""
    script = tmp_path / "supervisor.py"
    timeout = 2.0
    script.write_text(SLOW_READ_OF_A_CRASH.format(timeout=timeout, read=2 * timeout))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run-1")], env=env, capture_output=True,
                          text=True, timeout=PROCESS_TIMEOUT, cwd=work)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["reads"] == 1, seen  # read once, parked: not again at a deadline
    assert seen["outcome"] == "crashed" and seen["reason"].startswith("killed by SIGSEGV"), seen
    assert seen["duration"] >= 2 * timeout, seen  # its read ran past the deadline
