"""Nothing outlives lifeguard: SIGKILL of the supervisor leaves no run behind (the watchdog kills them),
and any burst of stop signals leads to one orderly shutdown (trees killed, reports written, 128 + the
first signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lifeguard.proc.procfs import children_of
from tests.helpers import Pace, pid_alive, start_cli, wait_for

# The figure: both hung trees gone this long after the supervisor's SIGKILL.
TREES_GONE_WITHIN = 2.0


def _hanging(pid_dir: Path, timeout: float) -> str:
    """Two series that hang, each run with a forked grandchild in a session of its own; every process
    writes its pid into ``pid_dir`` (the handshake: the test signals only once all are up)."""
    return f"""
import os, time
import lifeguard

def _announce(tag):
    path = os.path.join({str(pid_dir)!r}, f"{{tag}}-{{os.getpid()}}")
    open(path + ".tmp", "w").close()
    os.rename(path + ".tmp", path)

def _hang(tag):
    if os.fork() == 0:
        os.setsid()
        _announce(tag + "-grandchild")
        time.sleep(1000)
    _announce(tag)
    time.sleep(1000)

@lifeguard.scenario(expect={{"default": "hung"}}, timeout={timeout})
def first():
    _hang("first")

@lifeguard.scenario(expect={{"default": "hung"}}, timeout={timeout})
def second():
    _hang("second")
"""


def _start(path: Path, report: Path, *options: str) -> subprocess.Popen[str]:
    return start_cli("run", str(path), "--report", str(report), "--no-native", *options, terminal_sigint=True)


def _pids(pid_dir: Path) -> list[int]:
    return [int(p.name.rsplit("-", 1)[1]) for p in pid_dir.iterdir() if not p.name.endswith(".tmp")]


def _two_hung_runs(scenario_file, tmp_path: Path, pace: Pace) -> tuple[subprocess.Popen[str], list[int]]:
    """A lifeguard (-j 2) with both hung runs and their grandchildren up; their pids."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    path = scenario_file(_hanging(pid_dir, pace.deadline(60)))
    supervisor = _start(path, tmp_path / "r", "-j", "2")
    try:
        wait_for(lambda: len(_pids(pid_dir)) == 4, "both hung runs and their grandchildren", pace.deadline(30))
    except BaseException:
        _cleanup(supervisor, _pids(pid_dir))
        raise
    return supervisor, _pids(pid_dir)


def _cleanup(supervisor: subprocess.Popen[str], pids: list[int]) -> None:
    if supervisor.poll() is None:
        os.killpg(supervisor.pid, signal.SIGKILL)
        supervisor.communicate(timeout=10)
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_lifeguard_leaves_no_run_behind(scenario_file, tmp_path: Path, pace: Pace) -> None:
    """The watchdog kills them. It is a batch process for the scheduler: woken by each run's start and end, it
    never takes a core from a run or from the supervisor."""
    supervisor, pids = _two_hung_runs(scenario_file, tmp_path, pace)
    try:
        watchdogs = [pid for pid in children_of(supervisor.pid) if pid not in pids]
        assert len(watchdogs) == 1, watchdogs
        assert os.sched_getscheduler(watchdogs[0]) == os.SCHED_BATCH
        assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in pids)  # the runs are left as they were
        os.kill(supervisor.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        supervisor.communicate(timeout=10)
        deadline = killed_at + TREES_GONE_WITHIN
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.01)
        survivors = [p for p in pids if pid_alive(p)]
        assert survivors == [], f"alive {time.monotonic() - killed_at:.2f} s after the SIGKILL: {survivors}"
    finally:
        _cleanup(supervisor, pids)


def _watchdogs(supervisor: int) -> list[int]:
    found = []
    for pid in children_of(supervisor):
        try:
            if b"watchdog" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("membership", ["cgroup", "subreaper"])
def test_a_run_that_kills_the_watchdog_still_dies_with_lifeguard(tmp_path: Path, pace: Pace,
                                                                membership: str) -> None:
    """A run may kill the watchdog (same user); the supervisor starts another, told everything registered,
    so a SIGKILL of the supervisor afterwards still takes the run's tree with it."""
    ready, killed = tmp_path / "ready", tmp_path / "killed"
    program = f"""
import os, signal, time
for pid in map(int, [p for p in os.listdir("/proc") if p.isdigit()]):
    try:
        argv = open(f"/proc/{{pid}}/cmdline", "rb").read()
        parent = int(open(f"/proc/{{pid}}/stat").read().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        continue
    if b"watchdog" in argv and parent == os.getppid():
        os.kill(pid, signal.SIGKILL)
        open({str(killed)!r}, "a").write(f"{{pid}}\\n")
if os.fork() == 0:
    os.setsid()
    open({str(ready)!r} + ".tmp", "w").write(str(os.getpid()))
    os.rename({str(ready)!r} + ".tmp", {str(ready)!r})
    time.sleep(1000)
time.sleep(1000)
"""
    supervisor = start_cli("run", "--no-native", "--timeout", str(pace.deadline(120)), "-c", program,
                           env={"LIFEGUARD_MEMBERSHIP": membership})
    pids: list[int] = []
    try:
        wait_for(ready.exists, "the run's grandchild", pace.deadline(30))
        pids = [int(ready.read_text())]
        gone = {int(line) for line in killed.read_text().split()}
        assert gone, "the run found no watchdog to kill"
        wait_for(lambda: len(live := _watchdogs(supervisor.pid)) == 1 and not gone & set(live), "a new watchdog",
                 pace.deadline(10))
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.communicate(timeout=10)
        wait_for(lambda: not pid_alive(pids[0]), "the grandchild to die with lifeguard", pace.deadline(5))
    finally:
        _cleanup(supervisor, pids)


DOUBLE_SIGNALS = [
    (signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT),
    (signal.SIGHUP, signal.SIGTERM), (signal.SIGINT, signal.SIGINT), (signal.SIGQUIT, signal.SIGINT),
    (signal.SIGTERM, signal.SIGHUP), (signal.SIGHUP, signal.SIGHUP), (signal.SIGINT, signal.SIGQUIT),
    (signal.SIGTERM, signal.SIGTERM),
]


@pytest.mark.parametrize(("trial", "signals"), list(enumerate(DOUBLE_SIGNALS)))
def test_a_second_stop_signal_does_not_cut_the_shutdown_short(scenario_file, tmp_path: Path, pace: Pace,
                                                               trial: int, signals: tuple[int, int]) -> None:
    supervisor, pids = _two_hung_runs(scenario_file, tmp_path, pace)
    try:
        first, second = signals
        os.kill(supervisor.pid, first)
        time.sleep(0.005 * (trial % 5))  # the second lands 0-20 ms later: during the first's cleanup
        os.kill(supervisor.pid, second)
        out, err = supervisor.communicate(timeout=pace.deadline(60))
        # The first signal's code; two that land before Python runs a handler are run in signal-number
        # order (CPython checks pending signals from 1 up), so then it may be the second's.
        assert supervisor.returncode in (128 + first, 128 + second), out + err
        assert [p for p in pids if pid_alive(p)] == []
        data = json.loads((tmp_path / "r" / "report.json").read_text())
        assert data["interrupted"] is True and data["all_expected"] is False
        assert "Traceback" not in err, err
    finally:
        _cleanup(supervisor, pids)


def test_a_daemon_found_by_ancestry_dies_with_the_supervisor(tmp_path: Path, pace: Pace) -> None:
    """A run tracked by ancestry (pytest --lifeguard, a head-started command) whose daemon left its process
    group and wiped its environment: once a look of the supervisor has found it, the watchdog knows it, and
    kills it when the supervisor vanishes (here: the watchdog's pipe closes with the run still registered, as
    at a SIGKILL). This test's process is the supervisor (it becomes a subreaper, as earlier ones made it)."""
    import sys
    import textwrap

    from lifeguard.run.containment import Containment
    from tests.integration.test_membership import ESCAPES

    pid_file = tmp_path / "daemon.pid"
    daemon_code = textwrap.dedent(ESCAPES["double-fork-execve-empty-env"].format(pid_file=pid_file))
    program = f"import os, time\n{daemon_code}\ntime.sleep(1000)\n"
    owner = Containment(prefer="subreaper")
    run = owner.for_run(os.urandom(8).hex(), by_ancestry=True)
    root = subprocess.Popen([sys.executable, "-c", program], preexec_fn=os.setpgrp)  # a run leads its group
    daemon = 0
    try:
        run.started(root.pid)
        wait_for(pid_file.exists, "the daemon", pace.deadline(30))
        daemon = int(pid_file.read_text())
        wait_for(lambda: daemon in run.members(), "a look that finds the daemon", pace.deadline(10))
        owner.watchdog.close(wait=True)  # the pipe's end, with the run still registered: what a SIGKILL leaves
        wait_for(lambda: not pid_alive(daemon), "the daemon to die with the supervisor", pace.deadline(5))
    finally:
        root.kill()
        root.wait(timeout=30)
        if daemon and pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)
        owner.close()


# A stand-in for the bootstrap's first step: it waits for its cgroup, then says so.
WAITS_FOR_CGROUP = """
import os
from lifeguard.child import joined
joined.wait_for_cgroup()
print(os.environ.get("LIFEGUARD_SUPERVISOR", "popped"), flush=True)
"""


def test_a_bootstrap_whose_supervisor_died_before_moving_it_ends_itself() -> None:
    """A run's bootstrap is spawned without a death signal (a vfork): the watchdog kills it once it is in the
    run's cgroup. If the supervisor dies before moving it there, the bootstrap, waiting for its cgroup, sees
    another parent and ends at once instead of running its spec as an orphan."""
    import sys

    not_the_parent = str(os.getpid() + 1 if os.getpid() < 2**22 else 2)
    env = dict(os.environ, LIFEGUARD_SUPERVISOR=not_the_parent, LIFEGUARD_CGROUP=":/lifeguard-no-such-folder")
    done = subprocess.run([sys.executable, "-c", WAITS_FOR_CGROUP], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    assert done.returncode == 1 and done.stdout == b"", done
    # Its parent is still there: it waits as long as ever (JOIN_WAIT), then goes on, the variable not passed on.
    env["LIFEGUARD_SUPERVISOR"] = str(os.getpid())
    done = subprocess.run([sys.executable, "-c", WAITS_FOR_CGROUP], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout == b"popped\n", done
