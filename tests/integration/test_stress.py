"""Stress controls, perturbations, seeds, statistics and the warm fork-server, with real children."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import FREE_THREADED, Pace, load_report, pid_alive, run_cli, run_pids

RECORDER = '''
import lifeguard
from lifeguard import child

@lifeguard.scenario(timeout=20, fork_server=True)
def records_conditions():
    import gc, json, os, random, sys, threading
    state = {
        "switch": sys.getswitchinterval(),
        "threshold": gc.get_threshold()[0],
        "threads": sorted(t.name for t in threading.enumerate()),
        "cpus": len(os.sched_getaffinity(0)),
        "malloc": os.environ.get("PYTHONMALLOC"),
        "dev": sys.flags.dev_mode,
        "jitter": os.environ.get("LIFEGUARD_JITTER_US"),
        "hashseed": os.environ.get("PYTHONHASHSEED"),
        "random": random.random(),
        "pid": os.getpid(), "ppid": os.getppid(),
    }
    child.note(json.dumps(state))
'''


def _state(run: dict) -> dict:
    notes = [e for e in run["events"] if e["event"] == "note"]
    return json.loads(notes[0]["message"])


def test_each_perturbation_is_applied_and_recorded(scenario_file, tmp_path: Path) -> None:
    path = scenario_file(RECORDER)
    proc = run_cli("run", str(path), "--perturb", "all", "--report", str(tmp_path / "r"), "--mode", "fresh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert set(run["perturbations"]) == {"switch-interval", "gc-aggressive", "gc-thread", "pin-cpu", "malloc-debug",
                                         "dev-mode", "jitter", "exit-starve"}
    state = _state(run)
    assert state["switch"] < 1e-5
    assert state["threshold"] == 1
    assert "lifeguard-gc" in state["threads"]
    assert state["cpus"] == 1
    assert state["malloc"] == "debug" and state["dev"] is True
    assert state["jitter"] is not None


GC_THREAD_AT_EXIT = '''
import lifeguard
from lifeguard import child

@lifeguard.scenario(timeout=20)
def collects_on_another_thread():
    import atexit, threading
    names = lambda: ",".join(sorted(t.name for t in threading.enumerate() if t.is_alive()))
    child.note("body " + names())
    atexit.register(lambda: child.note("atexit " + names()))
'''


def test_gc_thread_stops_collecting_when_the_exit_begins(scenario_file, tmp_path: Path) -> None:
    """A collection of its own still under way at finalization parks lifeguard's thread there (CPython 3.13+), and a
    free-threaded build's last collection waited for it: 1 of 100 runs of request_thread_collects_by_chance hung at
    exit on 3.13.15t. The collector runs while the body does and is gone by the program's atexit callbacks."""
    path = scenario_file(GC_THREAD_AT_EXIT)
    proc = run_cli("run", str(path), "--perturb", "gc-thread", "--report", str(tmp_path / "r"), "--mode", "fresh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [e["message"] for e in load_report(tmp_path / "r")["runs"][0]["events"] if e["event"] == "note"]
    assert len(notes) == 2 and notes[0].startswith("body ") and notes[1].startswith("atexit "), notes
    assert "lifeguard-gc" in notes[0] and "lifeguard-gc" not in notes[1], notes


def test_unperturbed_run_is_plain(scenario_file, tmp_path: Path) -> None:
    path = scenario_file(RECORDER)
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"), "--mode", "fresh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    state = _state(run)
    assert run["perturbations"] == [] and state["threshold"] != 1 and "lifeguard-gc" not in state["threads"]


# Seen by an object freed while the interpreter finalizes (after every atexit callback, lifeguard's last): the
# scheduling of a thread that waits (without the GIL) through the exit, and of the finalizing main thread.
EXIT_WITNESS = """
import os, sys, threading
out = sys.argv[1]
waiter = threading.Thread(target=threading.Event().wait, daemon=True)
waiter.start()

class Witness:
    def __del__(self, open=open, os=os, repr=repr, waiter=waiter.native_id, main=threading.get_native_id()):
        seen = (os.sched_getscheduler(waiter) == os.SCHED_IDLE, sorted(os.sched_getaffinity(waiter)),
                os.sched_getscheduler(main) == os.SCHED_IDLE, sorted(os.sched_getaffinity(main)))
        with open(out, "w") as f:
            f.write(repr(seen))

witness = Witness()
"""


@pytest.mark.skipif(FREE_THREADED, reason="a free-threaded 3.13 runs no __del__ of a module global at exit: "
                                          "its witness writes nothing, plain or not")
@pytest.mark.parametrize("perturbation", ["exit-starve", None])
def test_exit_starve_leaves_the_finalizing_thread_alone_on_a_cpu(tmp_path: Path, perturbation: str | None) -> None:
    script = tmp_path / "exits.py"
    script.write_text(EXIT_WITNESS)
    seen_file = tmp_path / "seen.txt"
    options = ["--perturb", perturbation] if perturbation else []
    proc = run_cli("run", *options, "--report", str(tmp_path / "r"), str(script), str(seen_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    waiter_idle, waiter_cpus, main_idle, main_cpus = eval(seen_file.read_text())
    if perturbation:
        assert waiter_idle and not main_idle
        assert len(main_cpus) == 1 and waiter_cpus == main_cpus
    else:
        assert not waiter_idle and not main_idle and waiter_cpus == main_cpus == sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("perturbation", [None, "exit-starve"])
def test_a_clean_bound_says_when_threads_outlived_the_body(tmp_path: Path, perturbation: str | None) -> None:
    """A clean series whose runs still had threads at exit says its bound may be loose for an exit race, and
    names the perturbation that tests one; under that perturbation it does not."""
    script = tmp_path / "daemon.py"
    script.write_text("import threading, time\n"
                      "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    quiet = tmp_path / "quiet.py"
    quiet.write_text("pass\n")
    options = ["--perturb", perturbation] if perturbation else []
    for target, warned in ((script, perturbation is None), (quiet, False)):
        report = tmp_path / f"r-{target.stem}"
        proc = run_cli("run", "--repeat", "3", *options, "--report", str(report), str(target))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ("3 of these runs still had other threads at exit" in proc.stdout) is warned, proc.stdout
        assert load_report(report)["summaries"][0]["runs_with_threads_at_exit"] == (3 if warned else 0)


def test_unknown_perturbation_is_a_usage_error() -> None:
    proc = run_cli("run", "--perturb", "gc-thread,cosmic-rays", "-c", "pass")
    assert proc.returncode == 2 and "unknown perturbation 'cosmic-rays'" in proc.stderr


def test_seed_is_recorded_and_replays(scenario_file, tmp_path: Path) -> None:
    path = scenario_file(RECORDER)
    first = run_cli("run", str(path), "--repeat", "3", "--report", str(tmp_path / "a"), "--mode", "fresh")
    assert first.returncode == 0, first.stdout + first.stderr
    runs = load_report(tmp_path / "a")["runs"]
    seeds = [r["seed"] for r in runs]
    assert len(set(seeds)) == 3, "every run gets its own seed"
    target = runs[1]
    replay = run_cli("run", str(path), "--seed", str(target["seed"]), "--report", str(tmp_path / "b"),
                     "--mode", "fresh")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    again = load_report(tmp_path / "b")["runs"]
    assert len(again) == 1 and again[0]["seed"] == target["seed"]
    assert _state(again[0])["hashseed"] == _state(target)["hashseed"]


def test_a_failed_runs_replay_line_pastes_as_is(tmp_path: Path) -> None:
    """The replay line holds the real code, the seed and the session's --timeout: run it verbatim."""
    code = "import os, sys; sys.stdout.flush(); os.abort()"
    first = run_cli("run", "--timeout", "7", "--no-native", "--report", str(tmp_path / "a"), "-c", code)
    assert first.returncode == EXIT_LIFETIME, first.stdout + first.stderr
    run = load_report(tmp_path / "a")["runs"][0]
    assert run["outcome"] == "crashed"
    words = shlex.split(run["replay"])
    # lifeguard's options first, the code last: what follows -c CODE would be the code's arguments.
    assert words[:2] == ["lifeguard", "run"] and words[-2:] == ["-c", code]
    assert words[words.index("--timeout") + 1] == "7"
    replay = run_cli("run", "--no-native", "--report", str(tmp_path / "b"), *words[2:])
    assert replay.returncode == EXIT_LIFETIME, replay.stdout + replay.stderr
    again = load_report(tmp_path / "b")["runs"]
    assert len(again) == 1 and again[0]["seed"] == run["seed"] and again[0]["outcome"] == "crashed"


def test_until_fail_stops_at_first_failure(scenario_file, tmp_path: Path) -> None:
    marker = tmp_path / "count"
    path = scenario_file(f'''
import lifeguard

@lifeguard.scenario(expect={{"default": "sometimes:failed"}}, timeout=20)
def fails_on_fourth_run():
    import os
    path = {str(marker)!r}
    count = int(open(path).read()) + 1 if os.path.exists(path) else 1
    open(path, "w").write(str(count))
    assert count < 4, "fourth run fails"
''')
    proc = run_cli("run", str(path), "--until-fail", "--repeat", "50", "-j", "1", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_report(tmp_path / "r")
    assert [r["outcome"] for r in sorted(data["runs"], key=lambda r: r["index"])] == ["passed"] * 3 + ["failed"]
    stats = data["summaries"][0]["stats"]
    assert stats["runs_to_first_failure"] == 4 and stats["failures"] == 1


def test_duration_bounds_the_session(scenario_file, tmp_path: Path, pace: Pace) -> None:
    path = scenario_file("import lifeguard\n\n@lifeguard.scenario(timeout=20)\ndef quick():\n    pass\n")
    # Long enough for a second round of runs on two workers at this machine's pace.
    duration = pace.deadline(1.5)
    proc = run_cli("run", str(path), "--duration", f"{duration:g}", "-j", "2", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_report(tmp_path / "r")
    assert len(data["runs"]) >= 3
    assert data["duration"] < duration + 20  # the last runs started before the end finish


def test_fixed_verdict_states_its_bound(scenario_file, tmp_path: Path) -> None:
    path = scenario_file("import lifeguard\n\n@lifeguard.scenario(timeout=20)\ndef quick():\n    pass\n")
    proc = run_cli("run", str(path), "--repeat", "40", "-j", "2", "--mode", "fork-server")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "under lifeguard, 0/40 runs failed: rate < 8.8% at 95%" in proc.stdout


FORKED = '''
import lifeguard

@lifeguard.scenario(timeout=20, fork_server=True)
def forked_passes():
    import os
    assert os.getpgid(0) == os.getpid() != os.getsid(0), "each forked run leads its own process group"

@lifeguard.scenario(timeout=20, fork_server=True, expect={"default": "crashed@run"})
def forked_crashes():
    import ctypes
    ctypes.string_at(0)

@lifeguard.scenario(timeout=HANG_DEADLINE, fork_server=True, expect={"default": "hung@run"})
def forked_hangs():
    import threading
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()

@lifeguard.scenario(timeout=20, fork_server=True, expect={"default": "crashed@exit"})
def forked_but_exit_bound():
    import atexit, os
    atexit.register(os.abort)

@lifeguard.scenario(timeout=20, fork_server=True, expect={"default": "failed@run"})
def forked_raises():
    raise ValueError("forked body raised")
'''


def forked_scenarios(pace: Pace) -> str:
    """FORKED, with a deadline for forked_hangs that a forked run never reaches while still starting."""
    return FORKED.replace("HANG_DEADLINE", pace.deadline_text(2))


@pytest.mark.parametrize("mode", ["auto", "fork-server"])
def test_fork_server_runs_and_exit_mode_choice(scenario_file, tmp_path: Path, mode: str, pace: Pace) -> None:
    path = scenario_file(forked_scenarios(pace))
    proc = run_cli("run", str(path), "--mode", mode, "--repeat", "2", "-j", "2", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = load_report(tmp_path / "r")["runs"]
    modes = {r["scenario"]: r["mode"] for r in runs}
    assert modes["forked_passes"] == "fork-server/fast"
    # An exit-phase expectation never runs with a fast exit: fresh under auto, full finalization when forced.
    assert modes["forked_but_exit_bound"] == ("fresh" if mode == "auto" else "fork-server/full")
    hung = next(r for r in runs if r["scenario"] == "forked_hangs")
    assert any("forked_hangs" in dump for dump in hung["python_stacks"].values())
    for run in runs:
        for pid in run_pids(run):
            assert not pid_alive(pid), f"{run['scenario']}: pid {pid} survived"
    assert "forked body raised" in next(r for r in runs if r["scenario"] == "forked_raises")["reason"]


def test_fresh_mode_overrides_fork_server(scenario_file, tmp_path: Path, pace: Pace) -> None:
    path = scenario_file(forked_scenarios(pace))
    proc = run_cli("run", f"{path}::forked_passes", "--mode", "fresh", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0
    assert load_report(tmp_path / "r")["runs"][0]["mode"] == "fresh"


def test_start_perturbations_force_a_fresh_interpreter(scenario_file, tmp_path: Path, pace: Pace) -> None:
    path = scenario_file(forked_scenarios(pace))
    proc = run_cli("run", f"{path}::forked_passes", "--mode", "fork-server", "--perturb", "dev-mode",
                   "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load_report(tmp_path / "r")["runs"][0]["mode"] == "fresh"


def test_progress_bar_on_a_terminal(scenario_file, tmp_path: Path) -> None:
    """On a terminal (a real pseudo-terminal here) the progress bar redraws in place."""
    import os
    import pty
    import select
    import subprocess
    import time

    from tests.helpers import ROOT, real_python

    path = scenario_file("import lifeguard\n\n@lifeguard.scenario(timeout=20)\ndef quick():\n    pass\n")
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([real_python(), "-m", "lifeguard", "run", str(path), "--repeat", "6", "-j", "2"],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other end closed: the program has exited
                    break
                if not chunk:
                    break
                output += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0, output.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        os.close(master)
    text = output.decode(errors="replace")
    assert "\r\x1b[K  [" in text and "runs 6/6  unexpected 0" in text, text  # redrawn in place, erased first
    # A terminal gets colour: the verdict marks and the final state.
    assert "\x1b[32mok \x1b[0m" in text and "\x1b[32mall as expected\x1b[0m" in text, text
