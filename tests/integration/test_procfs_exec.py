"""A process in the middle of an exec shows an empty environment for a moment: its markers are "not known yet",
never "absent" (a discovery's setsid child caught there was not reported, and outlived the discovery)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from lifeguard.proc.procfs import children_of, exec_state, has_env_marker
from tests.helpers import Pace

MARKER = "LIFEGUARD_TEST_MARKER"


# Starts children that inherit its environment (as a discovery's file starts a setsid child), one after another.
STARTER = """
import ctypes, signal, subprocess, sys, time
die_with_parent = lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: none outlives the test
while True:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                             preexec_fn=die_with_parent)
    time.sleep(0.03)
    child.kill()
    child.wait()
"""


def test_a_marker_read_during_an_exec_is_not_known_yet_never_absent(pace: Pace) -> None:
    """The environment of a marked process's children is read in a loop as they start and exec, until the
    exec's empty moment has been seen (it lasts microseconds: about one start in twenty here)."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER], env=dict(os.environ, **{MARKER: "yes"}),
                               stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + pace.deadline(60)
    answers: set[bool | None] = set()
    unmarked = []
    try:
        while None not in answers and time.monotonic() < deadline:
            for pid in children_of(starter.pid):
                answer = has_env_marker(pid, MARKER, "yes")
                if answer is False:  # wrong if it reads as marked a moment later (an exiting one never does)
                    time.sleep(0.005)
                    if has_env_marker(pid, MARKER, "yes"):
                        unmarked.append(pid)
                answers.add(answer)
    finally:
        starter.kill()
        starter.wait(timeout=10)
    assert None in answers, "no child was caught in its exec"
    assert not unmarked, f"marked processes read as unmarked: {unmarked}"


def test_a_kernel_thread_or_a_zombie_has_no_environment_to_wait_for() -> None:
    """A kernel thread and a zombie have no environment to wait for; this very process is past its exec."""
    assert exec_state(2) is None  # kthreadd
    assert exec_state(os.getpid()) == "running"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while not os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT):  # a zombie, not reaped
            time.sleep(0.01)
        assert exec_state(child.pid) is None
    finally:
        child.wait(timeout=10)
    assert has_env_marker(os.getpid(), MARKER, "yes") is False
