"""Hangs told apart by what the kernel says each thread did: asleep, spinning, stopped, or a forked child
waiting for a thread pool that stayed in its parent. Real native programs, compiled here, run under
`lifeguard run`; the findings must match what the threads really did."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import FREE_THREADED, NEEDS_GIL, Pace, load_report, pid_alive, run_cli, run_pids

# A deadline (seconds, at least) for runs that must hang in their body, scaled by Pace to this machine.
HANG_AT_LEAST = 3
COMPILE_TIMEOUT = 120

NATIVE_WAITS = r"""
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/futex.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int never = 0;
static int futex_word = 0;
static void *sleeper(void *arg) {
    pthread_mutex_lock(&m);
    while (!never) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    return 0;
}
/* A raw futex system call, the way Rust runtimes park threads: no libc wait function on the stack. */
static void *parker(void *arg) { for (;;) syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0); return 0; }
void park_forever(void) {
    pthread_t a, b;
    pthread_create(&a, 0, sleeper, 0);
    pthread_create(&b, 0, parker, 0);
    pthread_join(a, 0);
}
void spin_forever(void) { volatile unsigned long i = 0; for (;;) i++; }
void pause_forever(void) { for (;;) pause(); }
"""

OPENMP = r"""
double parallel_sum(int n) {
    double s = 0;
#pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; i++) s += i * 0.5;
    return s;
}
"""

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def compile_library(tmp_path: Path, source: str, name: str, *flags: str) -> Path:
    c_file = tmp_path / f"{name}.c"
    c_file.write_text(source)
    library = tmp_path / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-g", "-O1", *flags, "-o", str(library), str(c_file), "-lpthread"],
                   check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    return library


def run_hang(tmp_path: Path, pace: Pace, code: str, *options: str) -> tuple[dict[str, Any], str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    proc = run_cli("run", "--timeout", pace.deadline_text(HANG_AT_LEAST), "--report", str(tmp_path / "r"),
                   *options, str(script))
    assert proc.returncode in (0, EXIT_LIFETIME), proc.stdout + proc.stderr  # a hang, if it hung
    run = load_report(tmp_path / "r")["runs"][0]
    for pid in run_pids(run):
        assert not pid_alive(pid)
    return run, proc.stdout


def kernel_states(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["kernel"] for p in run["backtraces"] for t in p["threads"] if t.get("kernel")]


@needs_gcc
def test_threads_asleep_in_unlisted_waits_are_blocked_never_busy(tmp_path: Path, pace: Pace) -> None:
    """A raw futex park and a condition wait: every thread sleeps, so no finding may call it a busy loop."""
    library = compile_library(tmp_path, NATIVE_WAITS, "waits")
    run, stdout = run_hang(tmp_path, pace, f"import ctypes\nctypes.CDLL({str(library)!r}).park_forever()\n")
    assert run["outcome"] == "hung"
    states = kernel_states(run)
    assert len(states) == 3 and {s["activity"] for s in states} == {"blocked"}
    assert {s["syscall"] for s in states} == {"futex"}
    assert [f["kind"] for f in run["findings"]] == ["hang"]
    summary = run["findings"][0]["summary"]
    assert "every thread blocked" in summary and "park_forever" in summary and "program.py:2" in summary
    assert "busy" not in json.dumps(run["findings"]) and "busy" not in stdout


@needs_gcc
def test_a_native_spin_is_a_busy_loop_with_its_frame(tmp_path: Path, pace: Pace) -> None:
    library = compile_library(tmp_path, NATIVE_WAITS, "waits")
    run, stdout = run_hang(tmp_path, pace, f"import ctypes\nctypes.PyDLL({str(library)!r}).spin_forever()\n")
    finding = run["findings"][0]
    assert finding["kind"] == "busy-loop", run["findings"]
    assert "spin_forever" in finding["summary"]
    assert ("holding the GIL" in finding["summary"]) is not FREE_THREADED, finding["summary"]
    assert kernel_states(run)[0]["activity"] == "spinning"
    assert "finding [busy-loop]" in stdout and "spin_forever" in stdout


def test_a_stopped_process_is_called_stopped(tmp_path: Path, pace: Pace) -> None:
    run, _ = run_hang(tmp_path, pace, "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n")
    assert [f["kind"] for f in run["findings"]] == ["stopped"], run["findings"]
    assert "program.py:2" in run["findings"][0]["summary"]


@pytest.mark.skipif(FREE_THREADED, reason=NEEDS_GIL)
@needs_gcc
def test_holding_the_gil_in_a_sleep_is_not_a_deadlock(tmp_path: Path, pace: Pace) -> None:
    """The main thread pauses in C with the GIL held (ctypes.PyDLL); a Python thread waits for the GIL.
    Nothing waits back: its own finding, not gil-deadlock."""
    library = compile_library(tmp_path, NATIVE_WAITS, "waits")
    code = (f"import ctypes, threading, time\nstarted = threading.Event()\n"
            f"def ticker():\n    started.set()\n    while True:\n        time.sleep(0.01)\n"
            f"threading.Thread(target=ticker, daemon=True).start()\nstarted.wait()\n"
            f"ctypes.PyDLL({str(library)!r}).pause_forever()\n")
    run, stdout = run_hang(tmp_path, pace, code)
    kinds = [f["kind"] for f in run["findings"]]
    assert kinds == ["gil-held-while-blocked"], run["findings"]
    summary = run["findings"][0]["summary"]
    assert "holds the GIL while blocked in pause" in summary
    assert "pause_forever" in summary and "1 other thread(s) wait for the GIL" in summary


@needs_gcc
def test_forked_child_waiting_for_an_openmp_team_names_the_runtime(tmp_path: Path, pace: Pace) -> None:
    library = compile_library(tmp_path, OPENMP, "omp", "-fopenmp")
    code = (f"import ctypes, os\nlib = ctypes.CDLL({str(library)!r})\nlib.parallel_sum.restype = ctypes.c_double\n"
            f"lib.parallel_sum(100000)\npid = os.fork()\nif pid == 0:\n    lib.parallel_sum(100000)\n"
            f"    os._exit(0)\nos.waitpid(pid, 0)\n")
    run, stdout = run_hang(tmp_path, pace, code, "--expect", "hung@fork-child")
    assert (run["outcome"], run["phase"]) == ("hung", "fork-child")
    finding = run["findings"][0]
    assert finding["kind"] == "fork-runtime", run["findings"]
    assert "libgomp" in finding["summary"] and "parallel_sum" in finding["summary"]
    assert "program.py:7" in finding["summary"] and "OpenMP worker(s)" in finding["summary"]
    forked = next(e for e in run["events"] if e["event"] == "forked")
    assert len(forked["parent_threads"]) >= 2  # the main thread and at least one OpenMP worker
    assert "finding [fork-runtime]" in stdout  # an expected reproduction still says what explains it
