"""`lifeguard run --scheduler`: a real Dask cluster on the loopback address (a `dask scheduler` and two
`dask worker` processes started here) runs a mixed plan: passing runs, crashes at exit, a hang with its
stacks. A worker killed mid-campaign loses no run; Ctrl-C leaves no process on any worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifeguard.child.protocol import CLUSTER_PRIVATE_ENV
from lifeguard.proc.procfs import children_of
from tests.helpers import ROOT, Pace, finish_cli, load_report, pid_alive, run_cli, start_cli, wait_for

pytest.importorskip("distributed", reason="Dask's distributed is not installed (the test extra has it)")

START_TIMEOUT = 60.0  # the scheduler and the workers' own start-up
PLAN = """
import os
import signal
import time
from pathlib import Path

import lifeguard


@lifeguard.scenario(expect={{"default": "passed"}}, repeat={passing})
def passes():
    time.sleep({pause})


@lifeguard.scenario(expect={{"default": "crashed@exit"}}, repeat=3)
def crashes_at_exit():
    import atexit
    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)


@lifeguard.scenario(expect={{"default": "hung@run"}}, repeat=1, timeout={deadline})
def hangs():
    staged = Path({pid_file!r} + ".part")  # written whole, then renamed: the test reads it once it exists
    staged.write_text(str(os.getpid()))
    staged.rename({pid_file!r})
    time.sleep(600)
"""

WAITING_PLAN = """
import os
import time

import lifeguard


@lifeguard.scenario(expect={{"default": "passed"}}, repeat=1, timeout=300)
def waits_for_go():
    with open({waiting!r}, "a") as started:
        started.write(f"{{os.getpid()}}\\n")
    while not os.path.exists({go!r}):
        time.sleep(0.05)
"""


class Cluster:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.scheduler_file = folder / "scheduler.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        # One machine: the workers keep each run's files in folders of their own and ship them back, as
        # workers on other machines do (said by CLUSTER_PRIVATE_ENV, read by the worker's half only).
        env[CLUSTER_PRIVATE_ENV] = "1"
        self.env = env
        self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--scheduler-file", str(self.scheduler_file), "--no-dashboard"], "scheduler")
        wait_for(lambda: self.scheduler_file.exists() and self.scheduler_file.stat().st_size > 0,
                 "the scheduler's address", timeout=START_TIMEOUT)
        self.address = json.loads(self.scheduler_file.read_text())["address"]
        self.workers = [self.start_worker(f"w{n}") for n in (1, 2)]
        self.wait_for_workers(2)

    def _start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 (the process's own, for its life)
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        return self._start([sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--nthreads", "1",
                            "--no-nanny", "--no-dashboard", "--name", name], name)

    def wait_for_workers(self, count: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=START_TIMEOUT) as client:
            client.wait_for_workers(count, timeout=START_TIMEOUT)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield running
    finally:
        running.close()


def _plan(folder: Path, pace: Pace, *, passing: int = 4, pause: float = 0.0) -> tuple[Path, Path]:
    pid_file = folder / "hang.pid"
    plan = folder / "plan.py"
    plan.write_text(PLAN.format(passing=passing, pause=pause, deadline=pace.deadline(2), pid_file=str(pid_file)))
    return plan, pid_file


def _running_a_run(worker: int) -> bool:
    """Has the worker a run's child (a child that is not its watchdog)?"""
    for pid in children_of(worker):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"watchdog" not in command:
            return True
    return False


def _outcomes(report: dict) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for run in sorted(report["runs"], key=lambda r: (r["scenario"], r["index"])):
        found.setdefault(run["scenario"], []).append(f"{run['outcome']}@{run['phase']}" if run["phase"]
                                                     else run["outcome"])
    return found


def test_a_mixed_plan_on_the_cluster_ends_as_it_does_here(cluster: Cluster, pace: Pace, tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path, pace)
    remote = run_cli("run", str(plan), "--scheduler", cluster.address, "--report", str(tmp_path / "remote"))
    assert remote.returncode == 0, remote.stdout + remote.stderr
    local = run_cli("run", str(plan), "--report", str(tmp_path / "local"))
    assert local.returncode == 0, local.stdout + local.stderr
    on_cluster, here = load_report(tmp_path / "remote"), load_report(tmp_path / "local")
    assert _outcomes(on_cluster) == _outcomes(here) == {
        "passes": ["passed"] * 4, "crashes_at_exit": ["crashed@exit"] * 3, "hangs": ["hung@run"]}
    workers = {note.rpartition(" ")[2] for run in on_cluster["runs"] for note in run["notes"]
               if note.startswith("ran on the cluster's worker")}
    assert len(workers) == 2  # both workers ran some
    hang = next(run for run in on_cluster["runs"] if run["scenario"] == "hangs")
    assert any(finding["kind"] == "hang" for finding in hang["findings"])  # its stacks were read on the worker
    assert (Path(hang["run_dir"]) / "backtraces.txt").exists()  # written on the worker, shipped back
    crash = next(run for run in on_cluster["runs"] if run["scenario"] == "crashes_at_exit")
    assert Path(crash["run_dir"]).is_relative_to(tmp_path / "remote")  # shipped back from the worker's folder
    assert (Path(crash["run_dir"]) / "stderr.txt").exists()


def test_a_lost_worker_loses_no_run(cluster: Cluster, pace: Pace, tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path, pace, passing=12, pause=0.5)
    proc = start_cli("run", f"{plan}::passes", "--scheduler", cluster.address, "--report",
                     str(tmp_path / "out"), "--no-native")
    victim = cluster.workers[0]
    try:
        wait_for(lambda: (tmp_path / "out" / "results.jsonl").exists()
                 and len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) >= 2
                 and _running_a_run(victim.pid), "the campaign's first results, and a run on the worker",
                 timeout=START_TIMEOUT)
        os.killpg(victim.pid, signal.SIGKILL)  # mid-campaign, one of its runs under way
        done = finish_cli(proc)
    finally:
        replacement = cluster.start_worker("w1-again")
        cluster.workers[0] = replacement
    assert done.returncode == 0, done.stdout + done.stderr
    report = load_report(tmp_path / "out")
    assert sorted(run["index"] for run in report["runs"]) == list(range(12))  # every run, once
    assert {run["outcome"] for run in report["runs"]} == {"passed"}
    lost = [run for run in report["runs"] if any("was lost while it ran" in note for note in run["notes"])]
    # The run under way on the killed worker is run again elsewhere, the loss recorded. A run that had
    # finished there but whose result had not reached the scheduler yet is run again too (Dask recomputes a
    # result lost with its worker): one loss at least, never a run missing or twice in the report.
    assert len(lost) >= 1
    cluster.wait_for_workers(2)


def test_a_run_the_cluster_cancels_is_run_again(cluster: Cluster, pace: Pace, tmp_path: Path) -> None:
    """Dask cancels a client's futures when it loses the scheduler (or another client forces it): the run is
    submitted again, not reported as lifeguard's own error (dask/distributed#8514 hid the cancellation)."""
    from distributed import Client, Future

    waiting, go, plan = tmp_path / "waiting", tmp_path / "go", tmp_path / "plan.py"
    plan.write_text(WAITING_PLAN.format(waiting=str(waiting), go=str(go)))
    proc = start_cli("run", f"{plan}::waits_for_go", "--scheduler", cluster.address, "--report",
                     str(tmp_path / "out"), "--no-native")
    try:
        wait_for(waiting.exists, "the run to start on a worker", timeout=START_TIMEOUT)
        with Client(cluster.address, timeout=START_TIMEOUT) as other:
            keys = [key for keys in other.processing().values() for key in keys
                    if str(key).startswith("lifeguard-run-")]
            assert len(keys) == 1, keys
            other.cancel([Future(keys[0], client=other)], force=True, reason="cancelled-by-the-test")
        wait_for(lambda: len(waiting.read_text().split()) == 2, "the run to start again", timeout=START_TIMEOUT)
    finally:
        go.write_text("go")
        done = finish_cli(proc)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = load_report(tmp_path / "out")["runs"]
    assert run["outcome"] == "passed"
    assert "the cluster cancelled it 1 time(s) (cancelled-by-the-test): run again" in run["notes"], run["notes"]
    assert run["run_dir"].endswith("-again-1")  # the cancelled task, still under way, keeps the first folder
    cluster.wait_for_workers(2)


def test_ctrl_c_leaves_no_process_on_any_worker(cluster: Cluster, pace: Pace, tmp_path: Path) -> None:
    plan, pid_file = _plan(tmp_path, pace)
    plan.write_text(plan.read_text().replace(f"timeout={pace.deadline(2)}", "timeout=300"))
    proc = start_cli("run", f"{plan}::hangs", "--scheduler", cluster.address, terminal_sigint=True)
    wait_for(pid_file.exists, "the hanging run to start on a worker", timeout=START_TIMEOUT)
    child = int(pid_file.read_text())
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    done = finish_cli(proc)
    assert done.returncode == 130, done.stdout + done.stderr
    wait_for(lambda: not pid_alive(child), f"the run {child} on the worker to be killed", timeout=pace.deadline(30))
    assert time.monotonic() - started < pace.deadline(60)  # a bound, far above a kill's milliseconds
