"""A run's processes cannot escape it: setsid, a wiped or zeroed environment and double forks still leave
them members, reported as leftovers and killed; zombies the supervisor inherits are reaped. Both mechanisms
(a cgroup per run, and the subreaper with recorded ancestry), fresh and fork-server runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from lifeguard.proc import cgroups
from tests.helpers import Pace, load_report, pid_alive, run_cli, wait_for

MECHANISMS = ["cgroup", "subreaper"]
MODES = ["fresh", "fork-server"]

# Each pattern starts a process that leaves the run's session, then writes its pid to PID_FILE and sleeps;
# the body returns only once that pid is written (a handshake), so the escapee is alive when the run ends.
ESCAPES = {
    "setsid-env-wipe": """
    import subprocess
    subprocess.Popen(["sh", "-c", "echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && exec sleep 1000"],
                     start_new_session=True, env={{"PATH": "/usr/bin:/bin"}})
""",
    "double-fork-execve-empty-env": """
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            announce = "echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && exec sleep 1000"
            os.execve("/bin/sh", ["sh", "-c", announce], {{}})
        os._exit(0)
""",
    "zeroed-environment-block": """
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            import ctypes
            fields = open("/proc/self/stat").read().rpartition(")")[2].split()
            start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5))
            ctypes.memset(start, 0, end - start)
            with open("{pid_file}.tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename("{pid_file}.tmp", "{pid_file}")
            time.sleep(1000)
        os._exit(0)
""",
}


def _scenario(pattern: str, pid_file: Path, timeout: float) -> str:
    body = ESCAPES[pattern].format(pid_file=pid_file)
    return f"""
import os, time
import lifeguard

@lifeguard.scenario(timeout={timeout}, fork_server=True)
def escapes():
{body}
    deadline = time.monotonic() + {timeout} / 2
    while not os.path.exists("{pid_file}") and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def _cgroups_writable() -> bool:
    return bool(cgroups.find_hierarchies()) and any(os.access(h.base, os.W_OK) for h in cgroups.find_hierarchies())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("pattern", sorted(ESCAPES))
def test_an_escaping_process_is_a_leftover_and_is_killed(scenario_file, tmp_path: Path, pace: Pace,
                                                         pattern: str, mechanism: str, mode: str) -> None:
    if mechanism == "cgroup" and not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine: the subreaper cases cover it")
    pid_file, report = tmp_path / "escapee.pid", tmp_path / "r"
    path = scenario_file(_scenario(pattern, pid_file, pace.deadline(20)))
    escapee = None
    try:
        done = run_cli("run", str(path), "--report", str(report), "--no-native", "--mode", mode,
                       env={"LIFEGUARD_MEMBERSHIP": mechanism})
        escapee = int(pid_file.read_text()) if pid_file.exists() else None
        assert escapee is not None, done.stdout + done.stderr
        assert done.returncode == 1, done.stdout + done.stderr  # a passing body with a leftover: unexpected
        data = load_report(report)
        assert data["membership"].startswith("cgroup" if mechanism == "cgroup" else "subreaper"), data["membership"]
        run = data["runs"][0]
        assert escapee in [p["pid"] for p in run["leftover_processes"]], run
        assert not pid_alive(escapee)
    finally:
        if escapee and pid_alive(escapee):
            os.kill(escapee, signal.SIGKILL)


ORPHAN_FACTORY = """
import os, time
import lifeguard

@lifeguard.scenario(timeout={timeout})
def makes_orphans():
    # 50 children that each leave a grandchild behind: the grandchildren are re-parented to the supervisor
    # (the subreaper) and exit there, so the supervisor must reap them.
    for _ in range(50):
        if os.fork() == 0:
            if os.fork() == 0:
                time.sleep(0.01)
                os._exit(0)
            os._exit(0)
        os.wait()
    time.sleep(0.3)
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_inherited_zombies_are_reaped(scenario_file, tmp_path: Path, pace: Pace, mechanism: str) -> None:
    """The supervisor is the test process itself here, so its zombie children can be counted."""
    if mechanism == "cgroup" and not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    from lifeguard.interpreter import resolve
    from lifeguard.plan.discover import load_scenario_file
    from lifeguard.plan.scheduler import PlanOptions
    from lifeguard.run import containment as containment_module
    from lifeguard.run.containment import Containment
    from lifeguard.run.engine import Engine

    path = scenario_file(ORPHAN_FACTORY.format(timeout=pace.deadline(30)))
    previous = containment_module._containment
    containment_module._containment = Containment(prefer=mechanism)
    before = set(_zombie_children())  # earlier tests' orphans: this process may be a subreaper already
    try:
        engine = Engine(resolve(None), runs_dir=tmp_path / "runs")
        session = engine.run(load_scenario_file(path), PlanOptions(repeat=8))
        assert [s.counts for s in session.summaries] == [{"passed": 8}]
        zombies = [pid for pid in _zombie_children() if pid not in before]
        assert zombies == [], zombies
    finally:
        containment_module._containment.close()
        containment_module._containment = previous


def test_a_quiet_runs_end_reaps_the_zombie_orphans_in_its_folder(tmp_path: Path, pace: Pace) -> None:
    """A run whose end finds nothing alive (its folder only removed, not killed) still reaps the orphans that
    died in its folder as the supervisor's zombies: before the folder goes, while their cgroup names it."""
    if not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    from lifeguard.run.containment import Containment, spawn

    owner = Containment(prefer="cgroup")  # this process supervises: the orphan comes to it (a subreaper)
    run = owner.for_run(os.urandom(8).hex())
    program = "import os\nif os.fork() == 0:\n    if os.fork() == 0:\n        os._exit(0)\n    os._exit(0)\nos.wait()\n"
    before = set(_zombie_children())
    try:
        main = spawn([sys.executable, "-c", program], run.join_file(), stdin=subprocess.DEVNULL)
        run.started(main.pid)
        assert main.wait(timeout=pace.deadline(30)) == 0
        wait_for(lambda: set(_zombie_children()) - before, "the orphan to die as our zombie", pace.deadline(10))
        assert run.members() == []  # the end-of-run look: nothing alive, nothing of the run outside
        run.close()
        assert set(_zombie_children()) - before == set()
        assert not run.folder.path.exists()
    finally:
        owner.close()


def _zombie_children() -> list[int]:
    found = []
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            pids = Path(f"/proc/{os.getpid()}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state == "Z":
                found.append(int(pid))
    return found


def test_doctor_names_the_mechanism() -> None:
    done = run_cli("doctor")
    assert "membership" in done.stdout, done.stdout
    expected = "cgroup" if _cgroups_writable() else "subreaper"
    assert expected in done.stdout.split("membership", 1)[1].splitlines()[0]


def test_a_run_whose_fork_server_dies_is_waited_for_not_called_hung(scenario_file, tmp_path: Path,
                                                                     pace: Pace) -> None:
    """The run kills its own fork-server: it is re-parented to the supervisor, which waits for it itself."""
    timeout = pace.deadline(20)
    path = scenario_file(f"""
import os, signal, time
import lifeguard

@lifeguard.scenario(timeout={timeout}, fork_server=True)
def kills_its_server():
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(0.2)
""")
    report = tmp_path / "r"
    done = run_cli("run", str(path), "--report", str(report), "--no-native", "--mode", "fork-server")
    assert done.returncode == 0, done.stdout + done.stderr
    run = load_report(report)["runs"][0]
    assert run["outcome"] == "passed" and run["mode"].startswith("fork-server"), run
    assert run["duration"] < timeout / 2, run["duration"]


def test_a_stopped_leftover_is_called_stopped(tmp_path: Path) -> None:
    script = tmp_path / "stops.py"
    ready = tmp_path / "child.pid"
    script.write_text(f"""
import os, signal, time
pid = os.fork()
if pid == 0:
    open({str(ready)!r} + ".tmp", "w").write(str(os.getpid()))
    os.rename({str(ready)!r} + ".tmp", {str(ready)!r})
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    if os.path.exists({str(ready)!r}):
        state = open(f"/proc/{{pid}}/stat").read().rpartition(")")[2].split()[0]
        if state == "T":
            break
    time.sleep(0.01)
""")
    report = tmp_path / "r"
    done = run_cli("run", "--report", str(report), "--no-native", str(script))
    child = int(ready.read_text())
    try:
        assert done.returncode == EXIT_LIFETIME, done.stdout + done.stderr
        run = load_report(report)["runs"][0]
        assert run["reason"].startswith(f"left stopped processes after exit: {child} ("), run["reason"]
        assert run["reason"].endswith(", stopped)"), run["reason"]
        assert [p["state"] for p in run["leftover_processes"]] == ["T"]
        assert not pid_alive(child)
    finally:
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_run_found_ended_is_not_looked_at_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a look finds a run's main process gone and nothing of it left, nothing of it can appear again (every
    orphan comes to the subreaper): the look at its close is spared (a /proc scan of every forked test's end)."""
    from lifeguard.proc import membership

    run = membership.SubreaperMembership("ended-run")
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        run.started(child.pid)  # alive until its stdin closes: its start time is read
        assert run.members() == [child.pid]
        assert not run.ended
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=60)
    assert run.members() == []
    assert run.ended

    def no_more_looks(*args: object) -> list[int]:
        raise AssertionError("/proc looked at again after the run was found ended")

    monkeypatch.setattr(membership, "children_of", no_more_looks)
    monkeypatch.setattr(membership, "all_processes", no_more_looks)
    assert run.members() == []
    run.close()


def _gone_pid() -> int:
    """A pid that was a process of ours a moment ago and is no process now (reaped)."""
    child = subprocess.Popen(["true"])
    child.wait(timeout=30)
    return child.pid


def _folder_with_a_sleeper(name: str) -> tuple[Path, subprocess.Popen[bytes]]:
    [hierarchy] = [h for h in cgroups.find_hierarchies() if os.access(h.base, os.W_OK)][:1]
    folder = hierarchy.base / name
    folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "1000"])
    (folder / "cgroup.procs").write_text(str(sleeper.pid))
    return folder, sleeper


@pytest.mark.parametrize("whose", ["gone-here", "another-namespace"])
def test_a_session_folder_is_stale_only_when_its_owner_is_proven_gone(whose: str) -> None:
    """A folder whose owner is a gone process of this PID namespace is killed and removed; one named by a
    lifeguard of another namespace (which this one cannot see, so its pid looks gone) is left whole."""
    if not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    namespace = cgroups.pid_namespace() if whose == "gone-here" else "4026000001"
    folder, sleeper = _folder_with_a_sleeper(f"lifeguard-{_gone_pid()}-{namespace}-abcdef")
    try:
        done = run_cli("run", "--no-native", "-c", "pass", env={"LIFEGUARD_MEMBERSHIP": "cgroup"})
        assert done.returncode == 0, done.stdout + done.stderr
        if whose == "gone-here":
            sleeper.wait(timeout=30)  # killed by the sweep (reaped here: it is our child)
            assert sleeper.returncode == -signal.SIGKILL and not folder.exists()
        else:
            assert sleeper.poll() is None and folder.is_dir()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(timeout=30)
        if folder.exists():
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)


def test_a_member_this_namespace_cannot_see_is_never_signalled(tmp_path: Path) -> None:
    """cgroup.procs names a process of another PID namespace as 0; kill(0) would be our own group."""
    from lifeguard.child.watchdog import folder_members

    (tmp_path / "cgroup.procs").write_text("0\n0\n1\n4242\n")
    assert folder_members(str(tmp_path)) == [4242]


def test_a_lifeguard_in_another_pid_namespace_leaves_a_live_sessions_runs_alone(tmp_path: Path) -> None:
    """The hostile case itself: a lifeguard started in a new PID namespace (`unshare --pid`) cannot see the pid
    of a lifeguard running outside it; it once swept that session's cgroup folder as stale and killed its run."""
    import shutil

    from tests.helpers import finish_cli, start_cli, wait_for

    if not _cgroups_writable() or shutil.which("unshare") is None:
        pytest.skip("needs a writable cgroup hierarchy and unshare(1)")
    up, go = tmp_path / "up", tmp_path / "go"
    waits = (f"import os, time\nopen({str(up)!r}, 'w').close()\ndeadline = time.monotonic() + 60\n"
             f"while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n    time.sleep(0.01)\n")
    outside = start_cli("run", "--no-native", "--timeout", "120", "-c", waits, env={"LIFEGUARD_MEMBERSHIP": "cgroup"})
    try:
        wait_for(up.exists, "the outside run to start", 60)
        inside = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "lifeguard",
                                 "run", "--no-native", "-c", "pass"], capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, LIFEGUARD_MEMBERSHIP="cgroup"), check=False)
        if "cannot change root filesystem propagation" in inside.stderr:  # a chroot: "/" is no mount point
            pytest.skip("unshare --mount-proc cannot make / private here (a chroot): " + inside.stderr.strip())
        assert inside.returncode == 0, inside.stdout + inside.stderr
    finally:
        go.touch()
        done = finish_cli(outside, 120)
    assert done.returncode == 0, done.stdout + done.stderr  # its run was left to end on its own


DAEMON = """
import os, time


def daemon_in(procs_file, pid_file):
    # Double fork: the daemon's parent exits, so the daemon becomes the supervisor's orphan (its subreaper).
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))  # out of the run's cgroup (root may)
            with open(pid_file + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(1000)
        os._exit(0)
    deadline = time.monotonic() + 30
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def test_a_daemon_moved_to_another_cgroup_is_still_the_runs(scenario_file, tmp_path: Path) -> None:
    """A run (root) that writes its daemon's pid into another cgroup's cgroup.procs: the daemon carries the
    run's marker and is the supervisor's orphan, so it is a leftover of that run and killed, not left running."""
    if not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    hierarchy = next(h for h in cgroups.find_hierarchies() if os.access(h.base, os.W_OK))
    pid_file, report = tmp_path / "daemon.pid", tmp_path / "r"
    path = scenario_file(DAEMON + f"""
import lifeguard

@lifeguard.scenario(timeout=60)
def moves_its_daemon_out():
    daemon_in({str(hierarchy.base / "cgroup.procs")!r}, {str(pid_file)!r})
""")
    daemon = None
    try:
        done = run_cli("run", str(path), "--report", str(report), "--no-native", env={"LIFEGUARD_MEMBERSHIP": "cgroup"})
        daemon = int(pid_file.read_text()) if pid_file.exists() else None
        assert daemon is not None, done.stdout + done.stderr
        assert done.returncode == 1, done.stdout + done.stderr
        [run] = load_report(report)["runs"]
        assert daemon in [p["pid"] for p in run["leftover_processes"]], run["reason"]
        assert not pid_alive(daemon)
    finally:
        if daemon and pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_a_daemon_moved_into_a_neighbour_run_fails_its_own_run_not_the_neighbour(scenario_file,
                                                                                 tmp_path: Path) -> None:
    if not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    hierarchy = next(h for h in cgroups.find_hierarchies() if os.access(h.base, os.W_OK))
    where, done_file, pid_file, report = (tmp_path / "neighbour", tmp_path / "done", tmp_path / "daemon.pid",
                                          tmp_path / "r")
    path = scenario_file(DAEMON + f"""
import lifeguard

BASE, VIEW = {str(hierarchy.base)!r}, {hierarchy.view!r}


def own_folder():
    for line in open("/proc/self/cgroup").read().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == {hierarchy.controllers!r}:
            return os.path.join(BASE, os.path.relpath(path, VIEW))


@lifeguard.scenario(timeout=60)
def innocent():
    with open({str(where)!r} + ".tmp", "w") as f:
        f.write(own_folder())
    os.rename({str(where)!r} + ".tmp", {str(where)!r})
    deadline = time.monotonic() + 30
    while not os.path.exists({str(done_file)!r}) and time.monotonic() < deadline:
        time.sleep(0.01)


@lifeguard.scenario(timeout=60)
def mover():
    deadline = time.monotonic() + 30
    while not os.path.exists({str(where)!r}) and time.monotonic() < deadline:
        time.sleep(0.01)
    daemon_in(os.path.join(open({str(where)!r}).read(), "cgroup.procs"), {str(pid_file)!r})
    open({str(done_file)!r}, "w").close()
""")
    daemon = None
    try:
        done = run_cli("run", str(path), "-j", "2", "--report", str(report), "--no-native",
                       env={"LIFEGUARD_MEMBERSHIP": "cgroup"})
        daemon = int(pid_file.read_text()) if pid_file.exists() else None
        assert daemon is not None, done.stdout + done.stderr
        outcomes = {run["scenario"]: run for run in load_report(report)["runs"]}
        assert outcomes["innocent"]["outcome"] == "passed", outcomes["innocent"]["reason"]
        assert outcomes["mover"]["outcome"] == "failed", outcomes["mover"]["reason"]
        assert daemon in [p["pid"] for p in outcomes["mover"]["leftover_processes"]]
        assert not pid_alive(daemon)
    finally:
        if daemon and pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_a_folders_members_are_found_below_it_and_not_in_empty_folders() -> None:
    """A run's members in folders it made below its own, two deep, are its members; an empty folder beside them
    (which v2 says holds no process) is not listed, and the members of a folder that is not populated are none."""
    if not _cgroups_writable():
        pytest.skip("no writable cgroup hierarchy on this machine")
    from lifeguard.child.watchdog import folder_members

    folder, top = _folder_with_a_sleeper(f"lifeguard-members-{os.getpid()}")
    deep = folder / "made" / "deeper"
    deep.mkdir(parents=True)
    (folder / "empty").mkdir()
    below = subprocess.Popen(["sleep", "1000"])
    try:
        (deep / "cgroup.procs").write_text(str(below.pid))
        assert sorted(folder_members(str(folder))) == sorted([top.pid, below.pid])
        assert folder_members(str(folder / "empty")) == []
        assert folder_members(str(deep)) == [below.pid]
    finally:
        for process in (top, below):
            process.kill()
            process.wait(timeout=30)
        for path in (deep, deep.parent, folder / "empty", folder):
            for _ in range(100):  # a killed member leaves its folder a moment after its reap
                try:
                    path.rmdir()
                    break
                except OSError:
                    import time

                    time.sleep(0.01)
