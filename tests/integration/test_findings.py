"""Findings from real evidence: gdb on live hangs and on crash cores, explained by the rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeguard.capture import gdb_available
from lifeguard.diagnose.evidence import PYTHON_LOCK_FUNCTIONS, matches
from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import ROOT, Pace, load_report, pid_alive, run_cli, run_pids

needs_gdb = pytest.mark.skipif(gdb_available() is None, reason="gdb is not installed (lifeguard doctor)")
# A deadline (seconds, at least) for runs that must hang where the bug is (a fork child, a body), never while
# still starting: tests.helpers.Pace scales it to this machine. HANG_DEADLINE stands for it in option lists.
HANG_AT_LEAST = 3
HANG_DEADLINE = "HANG_DEADLINE"

LOCK_FORK = '''
import os, threading, time

lock = threading.Lock()
ready = threading.Event()

def holder():
    with lock:
        ready.set()
        time.sleep(3600)

threading.Thread(target=holder, daemon=True).start()
ready.wait()
pid = os.fork()
if pid == 0:
    with lock:  # inherited locked; its owner does not exist in the child
        pass
    os._exit(0)
os.waitpid(pid, 0)
'''


@needs_gdb
def test_new_user_program_lock_held_across_fork(tmp_path: Path, pace: Pace) -> None:
    """A plain script no fixture knows: a thread holds a lock while another forks; the child takes it."""
    script = tmp_path / "lock_fork.py"
    script.write_text(LOCK_FORK)
    proc = run_cli("run", "--timeout", pace.deadline_text(HANG_AT_LEAST), "--report", str(tmp_path / "r"), str(script))
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert (run["outcome"], run["phase"]) == ("hung", "fork-child")
    finding = run["findings"][0]
    assert finding["kind"] == "fork-deadlock"
    line = next(n for n, text in enumerate(LOCK_FORK.splitlines(), 1) if "inherited locked" in text)
    assert "inherited from its parent" in finding["summary"] and f"lock_fork.py:{line}" in finding["summary"]
    # Native stacks of both processes, with Python frames, and the child's is the blocked one.
    processes = [b for b in run["backtraces"] if "threads" in b]
    assert len(processes) == 2
    child = next(p for p in processes if p["pid"] == finding["threads"][0]["pid"])
    names = [f["function"] for t in child["threads"] for f in t["frames"]]
    # A Python lock's wait (PyThread_acquire_lock_timed; from 3.14 through _PyMutex_LockTimed) and Python frames.
    assert any(matches(name, PYTHON_LOCK_FUNCTIONS) for name in names) and "<module>" in names, names
    assert (Path(run["run_dir"]) / "backtraces.txt").exists() and (Path(run["run_dir"]) / "findings.txt").exists()
    assert "finding [fork-deadlock]" in proc.stdout
    for pid in run_pids(run):
        assert not pid_alive(pid)


@needs_gdb
def test_crash_after_finalize_names_the_static_destructor(tmp_path: Path) -> None:
    proc = run_cli("run", str(ROOT / "scenarios" / "static_destructor.py"), "--variant", "buggy", "--repeat", "1",
                   "-k", "closures", "--report", str(tmp_path / "r"), env={"LIFEGUARD_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert (run["outcome"], run["phase"]) == ("crashed", "exit")
    finding = run["findings"][0]
    assert finding["kind"] == "static-destructor-after-finalize"
    assert "FunctionPool::~FunctionPool" in finding["summary"]
    assert finding["details"]["library"].endswith(".so")
    assert any("__run_exit_handlers" in frame for frame in finding["frames"])
    core_stacks = [b for b in run["backtraces"] if "core" in b.get("backend", "")]
    assert core_stacks and core_stacks[0]["signal"]["name"] in ("SIGSEGV", "SIGABRT")
    assert not list(Path(run["run_dir"]).glob("core*")), "cores are deleted unless --keep-cores"


@needs_gdb
def test_keep_cores(tmp_path: Path, scenario_file) -> None:
    path = scenario_file('''
import lifeguard

@lifeguard.scenario(expect={"default": "crashed@run"}, timeout=20)
def null_read():
    import ctypes
    ctypes.string_at(0)
''')
    proc = run_cli("run", str(path), "--keep-cores", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert list(Path(run["run_dir"]).glob("core*"))
    assert run["findings"][0]["kind"] == "crash"
    summary = run["findings"][0]["summary"]
    # the null read happens in libc's memmove/strlen-like copy called by ctypes' string_at
    assert summary.startswith("crashed with SIGSEGV in ") and "(phase run)" in summary, summary


def test_no_native_keeps_faulthandler_evidence(tmp_path: Path, scenario_file, pace: Pace) -> None:
    path = scenario_file(f'''
import lifeguard

@lifeguard.scenario(expect={{"default": "hung@run"}}, timeout={pace.deadline_text(2)})
def waits_forever():
    import threading
    threading.Event().wait()
''')
    proc = run_cli("run", str(path), "--no-native", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    assert run["backtraces"] == []
    assert any("waits_forever" in d for d in run["python_stacks"].values())
    assert run["findings"][0]["kind"] == "hang" and "waits_forever" in run["findings"][0]["summary"]


def test_wrong_thread_gc_is_named(tmp_path: Path, scenario_file) -> None:
    path = scenario_file('''
import lifeguard
from lifeguard import child

@lifeguard.scenario(expect={"default": "corrupted@run"}, timeout=20)
def corrupted_while_gc_on_worker():
    import gc, threading
    worker = threading.Thread(target=gc.collect, name="inference-worker")
    worker.start()
    worker.join(10)
    child.report_corruption("frame interleaved", data=b"\\x01\\x02")
''')
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    finding = load_report(tmp_path / "r")["runs"][0]["findings"][0]
    assert finding["kind"] == "wrong-thread-gc" and "inference-worker" in finding["summary"]


@needs_gdb
def test_backtrace_replay_catches_the_crash_under_gdb(tmp_path: Path, scenario_file) -> None:
    path = scenario_file('''
import lifeguard

@lifeguard.scenario(expect={"default": "crashed@exit"}, timeout=20)
def null_read_at_exit():
    import atexit, ctypes
    atexit.register(ctypes.string_at, 0)
''')
    proc = run_cli("run", str(path), "--backtrace", "replay", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = load_report(tmp_path / "r")["runs"][0]
    replayed = run["backtraces"][0]
    assert replayed["backend"].startswith("replay") and replayed["error"] is None
    assert replayed["signal"]["name"] == "SIGSEGV"
    functions = [f["function"] for t in replayed["threads"] for f in t["frames"]]
    assert "string_at" in functions
    assert not list(Path(run["run_dir"]).glob("core*")), "a replay leaves no core behind"
    assert (Path(run["run_dir"]) / "replay" / "events.txt").exists()


BUNDLED = [
    # (scenario file, scenario, extra options, finding kind, words the finding must name)
    ("static_destructor.py", "pool_outlives_interpreter", [], "static-destructor-after-finalize",
     ["FunctionPool::~FunctionPool", "__run_exit_handlers"]),
    ("static_destructor.py", "function_called_before_exit", [], "static-destructor-after-finalize",
     ["FunctionPool::~FunctionPool"]),
    ("static_destructor.py", "closures_released_after_finalize", [], "static-destructor-after-finalize",
     ["FunctionPool::~FunctionPool"]),
    ("fork_gil.py", "fork_with_pending_callback", ["--timeout", HANG_DEADLINE], "fork-deadlock",
     ["inside fork()", "std::thread::join", "CallbackPool::StopLocked", "pthread_atfork prepare handler",
      "RunPythonTask"]),
    ("fork_gil.py", "exit_with_pending_callback", [], "static-destructor-after-finalize",
     ["CallbackPool::~CallbackPool", "PyGILState_Ensure", "RunPythonTask"]),
    ("fork_gil.py", "callback_on_unregistered_thread", [], "python-without-thread-state",
     ["RunOnNativeThread", "without a thread state"]),
    ("gc_channel.py", "gc_thread_frees_dref_mid_call", [], "wrong-thread-gc", ["gc-collector", "kill_reg"]),
    # Stochastic: enough runs that at least one reproduces (rates of 60% and more seen).
    ("gc_channel.py", "gc_thread_races_owner_calls", ["--repeat", "8"], "wrong-thread-gc", ["gc-collector"]),
    ("gc_channel.py", "request_thread_collects_by_chance", ["--perturb", "gc-thread", "--repeat", "8"],
     "wrong-thread-gc", ["lifeguard-gc"]),
]


@needs_gdb
@pytest.mark.parametrize(("file", "name", "options", "kind", "words"), BUNDLED, ids=[b[1] for b in BUNDLED])
def test_bundled_buggy_scenarios_are_explained(tmp_path: Path, pace: Pace, file: str, name: str, options: list[str],
                                               kind: str, words: list[str]) -> None:
    options = [pace.deadline_text(HANG_AT_LEAST) if option == HANG_DEADLINE else option for option in options]
    proc = run_cli("run", f"{ROOT / 'scenarios' / file}::{name}", "--variant", "buggy", "--repeat", "1", *options,
                   "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    failed = [r for r in load_report(tmp_path / "r")["runs"] if r["outcome"] != "passed"]
    assert failed, "the buggy variant reproduced its bug"
    run = failed[0]
    kinds = [f["kind"] for f in run["findings"]]
    assert kinds and kinds[0] == kind, run["findings"]
    text = " ".join(f["summary"] + " " + " ".join(f["frames"]) for f in run["findings"])
    for word in words:
        assert word in text, (word, run["findings"])
    for pid in run_pids(run):
        assert not pid_alive(pid)


@needs_gdb
def test_fork_deadlock_on_313_names_the_runtime_lock(tmp_path: Path, pace: Pace) -> None:
    from tests.helpers import pyenv_python

    python = pyenv_python("3.13")
    if python is None:
        pytest.skip("CPython 3.13 is not installed")
    proc = run_cli("run", f"{ROOT / 'scenarios' / 'fork_gil.py'}::fork_with_pending_callback", "--variant", "buggy",
                   "--repeat", "1", "--timeout", pace.deadline_text(HANG_AT_LEAST), "--python", python,
                   "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    finding = load_report(tmp_path / "r")["runs"][0]["findings"][0]
    assert finding["kind"] == "fork-deadlock" and "HEAD_LOCK" in finding["summary"]
    assert "register_at_fork" in finding["hint"]
