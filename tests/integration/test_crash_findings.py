"""Crashes at exit explained by their own rule, from real native programs compiled here: a daemon thread ended
by finalization inside a noexcept C++ loop, a native worker still running when an atexit cleanup frees its
buffer, an over-released builtin type freed at finalization, and os.abort() from an atexit callback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifeguard.capture import gdb_available
from tests.helpers import load_report, pid_alive, run_cli, run_pids

COMPILE_TIMEOUT = 120

CALLBACK_LOOP = r"""
#include <unistd.h>
// Bindings run user callbacks from threads of their own; noexcept: a forced unwind through it terminates.
extern "C" void run_callbacks(void (*callback)(void)) noexcept {
    for (;;) { usleep(1000); callback(); }
}
"""
WORKER = r"""
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile long *buffer;
static volatile int running;
static void *worker(void *arg) { long sum = 0; running = 1; for (;;) sum += buffer[0]; return 0; }
void start_worker(void) {
    pthread_t t;
    buffer = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_create(&t, 0, worker, 0);
    while (!running) usleep(100);
}
void destroy_buffer(void) {
    munmap((void *)buffer, 4096);  /* the worker is not stopped first */
    /* It faults when next scheduled: on a busy machine the exit could end it first (1 CI run in ~30). */
    for (int i = 0; i < 500; i++) usleep(10000);
}
"""

needs_tools = pytest.mark.skipif(shutil.which("g++") is None or gdb_available() is None,
                                 reason="needs g++ and gdb (cores are read with the capture back ends)")


def build(tmp_path: Path, source: str, name: str, compiler: str) -> Path:
    src = tmp_path / name
    src.write_text(source)
    library = tmp_path / f"lib{src.stem}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-g", "-O1", "-o", str(library), str(src), "-lpthread"],
                   check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    return library


def crash_run(tmp_path: Path, code: str, expect: str = "crashed@exit") -> tuple[dict[str, Any], str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    proc = run_cli("run", "--expect", expect, "--report", str(tmp_path / "r"), str(script))
    run = load_report(tmp_path / "r")["runs"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for pid in run_pids(run):
        assert not pid_alive(pid)
    return run, proc.stdout


@needs_tools
def test_daemon_thread_ended_in_a_noexcept_frame(tmp_path: Path) -> None:
    library = build(tmp_path, CALLBACK_LOOP, "loop.cpp", "g++")
    code = (f"import ctypes, threading, time\nlib = ctypes.CDLL({str(library)!r})\nran = threading.Event()\n"
            f"callback = ctypes.CFUNCTYPE(None)(ran.set)\n"
            f"threading.Thread(target=lib.run_callbacks, args=(callback,), daemon=True).start()\nran.wait()\n"
            f"class SlowToFree:\n    def __del__(self):\n        time.sleep(0.2)  # finalizing\n"
            f"keep = SlowToFree()\n")
    if sys.version_info >= (3, 14) or (3, 13, 8) <= sys.version_info < (3, 14):
        # gh-87135: the daemon thread that takes the GIL after finalization now waits there for ever instead
        # of ending (the unwind through the noexcept frame was the crash); the process exits cleanly.
        run, _ = crash_run(tmp_path, code, expect="passed")
        assert run["outcome"] == "passed", run
        return
    run, stdout = crash_run(tmp_path, code)
    finding = run["findings"][0]
    assert finding["kind"] == "daemon-thread-at-finalization", run["findings"]
    assert "run_callbacks" in finding["summary"] and "libloop.so" in finding["summary"]
    assert 'libstdc++ said before the crash: "terminate called without an active exception"' in finding["summary"]
    assert run["stderr_messages"][0]["text"] == "terminate called without an active exception"
    assert "finding [daemon-thread-at-finalization]" in stdout


@needs_tools
def test_native_worker_still_running_when_atexit_frees_its_buffer(tmp_path: Path) -> None:
    library = build(tmp_path, WORKER, "worker.c", "gcc")
    code = (f"import atexit, ctypes\nlib = ctypes.CDLL({str(library)!r})\nlib.start_worker()\n"
            f"atexit.register(lib.destroy_buffer)\n")
    run, _ = crash_run(tmp_path, code)
    finding = run["findings"][0]
    assert finding["kind"] == "thread-running-at-exit", run["findings"]
    assert "worker (worker.c:" in finding["summary"] and "still running at exit" in finding["summary"]


@pytest.mark.skipif(gdb_available() is None, reason="gdb is not installed")
def test_an_over_released_builtin_type_is_a_refcount_underflow(tmp_path: Path) -> None:
    code = ("import ctypes, sys\nexcess = sys.getrefcount(ZeroDivisionError) - 3\n"
            "for _ in range(excess):\n    ctypes.pythonapi.Py_DecRef(ctypes.py_object(ZeroDivisionError))\n")
    if sys.version_info >= (3, 12):
        pytest.skip("builtin types are immortal from 3.12 on: the over-release frees nothing")
    run, _ = crash_run(tmp_path, code)
    finding = run["findings"][0]
    assert finding["kind"] == "refcount-underflow-at-finalization", run["findings"]
    assert "_ctypes" in finding["summary"]  # the suspects: the extension modules loaded at exit


@pytest.mark.skipif(gdb_available() is None, reason="gdb is not installed")
def test_abort_from_an_atexit_callback_names_os_abort(tmp_path: Path) -> None:
    run, _ = crash_run(tmp_path, "import atexit, os\natexit.register(os.abort)\n")
    finding = run["findings"][0]
    assert finding["kind"] == "crash"
    assert "os_abort_impl" in finding["summary"] and "atexit callback" in finding["summary"]


def test_a_scripts_globals_live_until_finalization(tmp_path: Path) -> None:
    """As under plain python: a module-level object of the script is freed at exit, not when its body ends
    (a destructor that crashes must crash in the exit phase)."""
    run, _ = crash_run(tmp_path, "import os\nclass Late:\n    def __del__(self):\n        os.abort()\nkeep = Late()\n")
    assert (run["outcome"], run["phase"]) == ("crashed", "exit")


@pytest.mark.parametrize("parent_exit", ["0", "1"])
def test_a_forked_childs_crash_is_fork_child_whatever_the_parent_does(tmp_path: Path, scenario_file: Any,
                                                                      parent_exit: str) -> None:
    """The child aborts; the parent sees it and returns or exits 1: the run crashed, in the fork child. A
    scenario has core files on from the start, so the child's core names its signal."""
    path = scenario_file(
        "import os, sys\nimport lifeguard\n\n"
        "@lifeguard.scenario(expect={'default': 'crashed@fork-child'}, repeat=1)\ndef child_aborts():\n"
        "    pid = os.fork()\n    if pid == 0:\n        os.abort()\n"
        f"    os.waitpid(pid, 0)\n    if {parent_exit}:\n        sys.exit({parent_exit})\n")
    proc = run_cli("run", "--report", str(tmp_path / "r"), str(path))
    run = load_report(tmp_path / "r")["runs"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (run["outcome"], run["phase"]) == ("crashed", "fork-child")
    assert "forked child" in run["reason"] and "SIGABRT" in run["reason"]
    assert any(p.get("signal") for p in run["backtraces"])


def test_a_plain_scripts_forked_child_crash_is_fork_child(tmp_path: Path) -> None:
    """A plain target has no core until it exits (cores never land in the user's folder): the child's fatal
    error on stderr still makes the run crashed@fork-child, not a crash at the parent's exit."""
    script = tmp_path / "program.py"
    script.write_text("import os, sys\npid = os.fork()\nif pid == 0:\n    os.abort()\n"
                      "os.waitpid(pid, 0)\nsys.exit(1)\n")
    proc = run_cli("run", "--expect", "crashed@fork-child", "--report", str(tmp_path / "r"), str(script))
    run = load_report(tmp_path / "r")["runs"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (run["outcome"], run["phase"]) == ("crashed", "fork-child")
    assert not any(f["kind"] == "static-destructor-after-finalize" for f in run["findings"])
