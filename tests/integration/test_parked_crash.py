"""Native stacks of a crash in a plain target's body, without a core and without a rerun: the crashing thread
waits in lifeguard's fatal-signal handler (lifeguard.child.crash_park) while the supervisor reads every
thread's stacks, then dies of its own signal (lifeguard.run.parked). Real programs compiled here: a library's
worker thread faulting, an abort on the main thread, a forked child's fault, a self-sent SIGSEGV, in a script,
-c code, a `--` command's Python and a test forked by `pytest --lifeguard`; none leaves a core in the user's
folder."""

from __future__ import annotations

import json
import platform
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from lifeguard.capture import gdb_available
from tests.helpers import build_shared_library, load_report, pid_alive, run_cli, run_pids
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

EXIT_LIFETIME = 86
NATIVE = r"""
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static volatile int started;
static void *worker(void *arg) { started = 1; *(volatile int *)arg = 1; return 0; }  /* a null pointer */
void start_worker(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    while (!started) usleep(100);
    for (;;) pause();  /* the worker's crash ends the process */
}
void check_invariant(int ok) { if (!ok) abort(); }
void read_through(int *pointer) { volatile int value = *pointer; (void)value; }
void write_through(int *pointer) { *pointer = 1; }
static volatile int go;
static void *aborter(void *arg) { (void)arg; while (!go) {} abort(); return 0; }
void crash_twice(void) {  /* two threads crash at once, as in a torn heap: each parks */
    pthread_t t;
    pthread_create(&t, 0, aborter, 0);
    go = 1;
    *(volatile int *)0 = 1;
}
"""

needs_tools = pytest.mark.skipif(shutil.which("gcc") is None or gdb_available() is None,
                                 reason="needs gcc and gdb (the crash's stacks are read with the capture back ends)")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shared_library(tmp_path_factory.mktemp("crashing"), "libcrashing.so", NATIVE, "-g", "-O0")


def cores_in(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name == "core" or p.name.startswith("core.")]


def crash_run(tmp_path: Path, *target: str, expect: str) -> tuple[dict[str, Any], str]:
    work = tmp_path / "project"
    work.mkdir(exist_ok=True)
    proc = run_cli("run", "--timeout", "60", "--expect", expect, "--report", str(tmp_path / "r"), *target,
                   cwd=work, shell_setup="ulimit -c unlimited 2>/dev/null || true")
    run = load_report(tmp_path / "r")["runs"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cores_in(work) == []
    for pid in run_pids(run):
        assert not pid_alive(pid)
    return run, proc.stdout


def crashed_process(run: dict[str, Any]) -> dict[str, Any]:
    crashed = [p for p in run["backtraces"] if p.get("signal")]
    assert len(crashed) == 1, run["backtraces"]
    return crashed[0]


@needs_tools
def test_a_worker_threads_fault_in_a_scripts_body_has_its_native_stack(tmp_path: Path, library: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(f"import ctypes\nctypes.CDLL({str(library)!r}).start_worker()\n")
    run, stdout = crash_run(tmp_path, str(script), expect="crashed@run")
    assert run["signal"] == signal.SIGSEGV
    process = crashed_process(run)
    assert process["signal"]["name"] == "SIGSEGV"
    finding = run["findings"][0]
    assert finding["kind"] == "crash", run["findings"]
    assert "worker (crashing.c:" in finding["summary"], finding["summary"]
    assert finding["threads"][0]["tid"] != process["pid"]  # the worker, not the main thread
    assert "worker (crashing.c:" in stdout  # the culprit frame on the terminal
    assert not any("--backtrace replay" in note for note in run["notes"]), run["notes"]


@needs_tools
def test_an_abort_on_the_main_thread_of_c_code(tmp_path: Path, library: Path) -> None:
    code = f"import ctypes\nctypes.CDLL({str(library)!r}).check_invariant(0)"
    run, _ = crash_run(tmp_path, "-c", code, expect="crashed@run")
    assert run["signal"] == signal.SIGABRT
    finding = run["findings"][0]
    assert "check_invariant (crashing.c:" in finding["summary"], finding["summary"]
    assert crashed_process(run)["signal"]["tid"] == crashed_process(run)["pid"]


@needs_tools
def test_a_forked_childs_fault_in_a_commands_python(tmp_path: Path, library: Path) -> None:
    script = tmp_path / "forks.py"
    script.write_text(f"import ctypes, os, sys\nlib = ctypes.CDLL({str(library)!r})\npid = os.fork()\n"
                      f"if pid == 0:\n    lib.write_through(None)\n    os._exit(0)\n"
                      f"os.waitpid(pid, 0)\n")
    run, _ = crash_run(tmp_path, "--", sys.executable, str(script), expect="crashed@fork-child")
    process = crashed_process(run)
    assert process["signal"]["name"] == "SIGSEGV"
    finding = run["findings"][0]
    assert "write_through (crashing.c:" in finding["summary"], finding["summary"]


@needs_tools
def test_a_self_sent_sigsegv_still_ends_the_process(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\nprint('survived')\n")
    run, stdout = crash_run(tmp_path, str(script), expect="crashed@run")
    assert run["signal"] == signal.SIGSEGV
    assert "survived" not in (Path(run["run_dir"]) / "stdout.txt").read_text()
    assert "survived" not in stdout


@needs_tools
def test_two_threads_crashing_at_once_are_read_too(tmp_path: Path, library: Path) -> None:
    run, _ = crash_run(tmp_path, "-c", f"import ctypes\nctypes.CDLL({str(library)!r}).crash_twice()\n",
                       expect="crashed@run")
    process = crashed_process(run)
    assert process["signal"]["name"] in ("SIGSEGV", "SIGABRT"), process["signal"]
    names = [frame.get("function") for thread in process["threads"] for frame in thread["frames"]]
    assert "crash_twice" in names or "aborter" in names, names


# A forked child of a threaded parent parks SIGTERM (a library may end it so); one its parent sends goes on.
TERMINATED_CHILD = """
import os, signal, threading, time
threading.Thread(target=threading.Event().wait, daemon=True).start()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    with open("/proc/self/status") as status:
        caught = int(next(line for line in status if line.startswith("SigCgt:")).split()[1], 16)
    os.write(write, b"armed" if caught >> (signal.SIGTERM - 1) & 1 else b"plain")
    while True:
        time.sleep(1)
print("child", os.read(read, 5).decode(), flush=True)
os.kill(pid, signal.SIGTERM)
if {wait}:
    print("child ended", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@needs_tools
@pytest.mark.skipif(platform.machine() != "x86_64", reason="SIGTERM parks on x86-64 only")
@pytest.mark.parametrize("wait", [True, False], ids=["parent-waits", "parent-exits"])
def test_a_sigterm_the_parent_sends_ends_a_parked_child_unread(tmp_path: Path, wait: bool) -> None:
    """The park is armed, yet the child dies of its parent's SIGTERM as it would without lifeguard (no 15 s
    sleep, no stacks read), also when the parent exits at once (no leftover)."""
    run, stdout = crash_run(tmp_path, "-c", TERMINATED_CHILD.format(wait=wait), expect="passed")
    assert run["outcome"] == "passed", (run["reason"], run.get("leftovers"))
    assert "child armed" in stdout, stdout
    assert not wait or "child ended -15" in stdout, stdout
    assert "SIGTERM handler" not in json.dumps(run)


# faulthandler, once disabled, puts back the handler it found: the park's (caught) or the default (not caught).
UNDER_FAULTHANDLER = """
import faulthandler, signal
faulthandler.disable()
with open("/proc/self/status") as status:
    caught = int(next(line for line in status if line.startswith("SigCgt:")).split()[1], 16)
print("PARKED", bool(caught >> (signal.SIGSEGV - 1) & 1))
"""


@needs_tools
@pytest.mark.parametrize("native", [True, False])
def test_the_park_is_set_only_where_native_capture_is(tmp_path: Path, native: bool) -> None:
    work = tmp_path / "project"
    work.mkdir()
    proc = run_cli("run", *([] if native else ["--no-native"]), "--timeout", "60", "-c", UNDER_FAULTHANDLER,
                   cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PARKED {native}" in proc.stdout, proc.stdout


WORKER_TEST = """
import ctypes


def test_starts_a_worker():
    ctypes.CDLL({library!r}).start_worker()
"""


@needs_tools
def test_a_worker_threads_fault_in_a_forked_pytest_test(plugin_env: pytest.Pytester, library: Path) -> None:
    plugin_env.makepyfile(test_worker=WORKER_TEST.format(library=str(library)))
    guarded = plugin_env.runpytest_subprocess("--lifeguard", "-p", "no:randomly", timeout=INNER_SESSION_TIMEOUT)
    guarded.assert_outcomes(failed=1)
    out = guarded.stdout.str()
    assert "lifeguard: crashed@run (SIGSEGV)" in out, out
    assert "at worker (crashing.c:" in out, out
    assert cores_in(plugin_env.path) == []


# A request thread collects (it allocates containers) and then calls into a library that faults; whether its
# collections freed anything decides whether they are evidence.
REQUESTS = """
import ctypes, gc, sys, threading

lib = ctypes.CDLL({library!r})


class Cycle:
    def __init__(self):
        self.me = self


def handle_requests():
    for n in range(50):
        if {cycles}:
            Cycle()
        gc.collect(0)  # a young collection on this thread, as allocation triggers
    if {said}:
        sys.stderr.write("Session freed from another thread: its connection is gone\\n")
        sys.stderr.flush()
    lib.read_through(None)


worker = threading.Thread(target=handle_requests, name="requests")
worker.start()
worker.join()
"""


@needs_tools
@pytest.mark.parametrize(("cycles", "said"), [(False, False), (True, False), (True, True)])
def test_collections_on_the_crashing_thread_are_evidence_only_if_something_ties_them_to_it(
        tmp_path: Path, library: Path, cycles: bool, said: bool) -> None:
    script = tmp_path / "program.py"
    script.write_text(REQUESTS.format(library=str(library), cycles=cycles, said=said))
    run, _ = crash_run(tmp_path, str(script), expect="crashed@run")
    kinds = [f["kind"] for f in run["findings"]]
    if said:
        assert kinds[0] == "wrong-thread-gc", run["findings"]
        # 50 collections freed a cycle each; the child records 20 of them (what a cycle counts as varies with
        # the version: 20 objects up to 3.13, 30 on 3.14).
        summary = run["findings"][0]["summary"]
        freed = re.search(r"at least 20 garbage collection\(s\) on non-main thread\(s\) freed at least (\d+) "
                          r"object\(s\) before SIGSEGV", summary)
        assert freed is not None and int(freed.group(1)) >= 20, summary
    else:
        # Collections that freed nothing ran no destructor there; ones that freed objects are not tied to the
        # crash by anything (threads that allocate collect all the time): the crash is explained by its stack.
        assert kinds == ["crash"], run["findings"]
        assert "read_through (crashing.c:" in run["findings"][0]["summary"], run["findings"][0]["summary"]


REFUSE = r"""
#include <stdlib.h>
#include <unistd.h>
static void __attribute__((noinline)) refuse_fork(void) {
    write(2, "aborting: fork refused\n", 23);
    abort();  /* the last instruction: the return address is past this function's end */
}
void (*volatile fork_hook)(void) = refuse_fork;
void run_fork_hook(void) { fork_hook(); }
"""


@needs_tools
def test_a_local_function_ending_in_abort_is_named_and_blamed(tmp_path: Path) -> None:
    """Without debug info, refuse_fork is only in the full symbol table, and its caller's pc is one past its
    end: looked up as is, it named nothing (or the next function) and the crash was blamed on ffi_call."""
    built = build_shared_library(tmp_path, "librefuse.so", REFUSE, "-O2")
    run, _ = crash_run(tmp_path, "-c", f"import ctypes\nctypes.CDLL({str(built)!r}).run_fork_hook()",
                       expect="crashed@run")
    summary = run["findings"][0]["summary"]
    assert "at refuse_fork in librefuse.so" in summary, summary
