"""The warm fork-server's spare: the next run's process is forked ahead and waits for its request, so a run's
fork is off its path (lifeguard.child.forkserver). Real server, real runs: a spare exists while a run goes on, a
spare killed while it waits is replaced without the next run noticing, and none outlives the session."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.helpers import pid_alive, run_cli, wait_for

# Each run finds the server's other child (the spare forked after this run's reply), kills it, and says so.
KILLS_THE_SPARE = '''
import json, os, signal, time
import lifeguard


def others(server, me):
    pids = []
    for task in os.listdir(f"/proc/{{server}}/task"):
        with open(f"/proc/{{server}}/task/{{task}}/children") as f:
            pids += [int(word) for word in f.read().split()]
    return [pid for pid in pids if pid != me]


@lifeguard.scenario(timeout=60)
def kills_the_spare():
    me, server = os.getpid(), os.getppid()
    deadline = time.monotonic() + 20  # the server forks the spare right after this run's reply
    while not (spares := others(server, me)) and time.monotonic() < deadline:
        time.sleep(0.005)
    for pid in spares:
        os.kill(pid, signal.SIGKILL)
    with open({out!r}, "a") as f:
        f.write(json.dumps({{"me": me, "server": server, "killed": spares}}) + "\\n")
'''


def test_a_spare_killed_while_it_waits_is_replaced_and_none_outlives_the_session(
        scenario_file: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    path = scenario_file(KILLS_THE_SPARE.format(out=str(out)))
    proc = run_cli("run", str(path), "--mode", "fork-server", "--repeat", "3", "-j", "1", "--no-native",
                   "--report", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(runs) == 3, runs
    assert len({run["server"] for run in runs}) == 1, runs  # one server: a dead spare did not end it
    killed = [pid for run in runs for pid in run["killed"]]
    assert all(len(run["killed"]) == 1 for run in runs), runs  # a spare waited beside every run
    assert not {run["me"] for run in runs} & set(killed), runs  # each run had a live spare of its own
    for pid in [runs[0]["server"], *killed]:  # the session's end: the server and every spare gone, none a zombie
        wait_for(lambda pid=pid: not pid_alive(pid), f"process {pid} gone", timeout=10)
