"""The wait-for picture of a hang, from real native programs compiled here and called through ctypes: a
lock-order inversion between two threads, a join of a thread that waits for a mutex the joiner holds (both a
`lock-cycle` naming who holds what, read from the futex words at capture), a thread that waits on a
condition nothing in its process can signal (the generic hang says nobody can wake it), and a destructor run by
the last collection of finalization that joins a thread waiting for a signal (phase exit, from the stack). The
same programs taking their locks in one order pass."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from lifeguard.capture import gdb_available
from tests.helpers import build_shared_library, load_report, pid_alive, run_cli, run_pids

HANG_TIMEOUT = "3"
LOCKS = r"""
#include <pthread.h>
#include <unistd.h>
static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER, second = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold_one;
static int inverted;

static void *other(void *arg) {
    pthread_mutex_t *a = inverted ? &second : &first, *b = inverted ? &first : &second;
    pthread_mutex_lock(a);
    if (inverted) pthread_barrier_wait(&both_hold_one);  /* each thread holds one lock: no timing involved */
    pthread_mutex_lock(b);
    pthread_mutex_unlock(b); pthread_mutex_unlock(a);
    return 0;
}

void flush_both(int invert) {
    pthread_t t;
    inverted = invert;
    pthread_barrier_init(&both_hold_one, 0, 2);
    pthread_mutex_lock(&first);
    pthread_create(&t, 0, other, 0);
    if (inverted) pthread_barrier_wait(&both_hold_one);
    pthread_mutex_lock(&second);
    pthread_mutex_unlock(&second); pthread_mutex_unlock(&first);
    pthread_join(t, 0);
}

static void *drainer(void *arg) { pthread_mutex_lock(&first); pthread_mutex_unlock(&first); return 0; }

void stop_drainer(int hold) {
    pthread_t t;
    if (hold) pthread_mutex_lock(&first);  /* joins while holding the lock the drainer needs */
    pthread_create(&t, 0, drainer, 0);
    pthread_join(t, 0);
    if (hold) pthread_mutex_unlock(&first);
}

static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int is_ready;

void wait_until_ready(int signal_first) {
    pthread_mutex_lock(&guard);
    if (signal_first) is_ready = 1;
    while (!is_ready) pthread_cond_wait(&ready, &guard);  /* nothing else will ever set it */
    pthread_mutex_unlock(&guard);
}

static pthread_t poller;
static void *poll_forever(void *arg) { for (;;) pause(); return 0; }
void start_poller(void) { pthread_create(&poller, 0, poll_forever, 0); }
void join_poller(void) { pthread_join(poller, 0); }  /* the poller is never told to stop */
"""

needs_tools = pytest.mark.skipif(shutil.which("gcc") is None or gdb_available() is None,
                                 reason="needs gcc and gdb (the hang's stacks are read with the capture back ends)")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shared_library(tmp_path_factory.mktemp("locks"), "liblocks.so", LOCKS)


def run_program(tmp_path: Path, library: Path, code: str, expect: str) -> dict[str, Any]:
    script = tmp_path / "program.py"
    script.write_text(f"import ctypes\nlib = ctypes.CDLL({str(library)!r})\n{code}\n")
    proc = run_cli("run", "--timeout", HANG_TIMEOUT, "--expect", expect, "--report", str(tmp_path / "r"),
                   str(script))
    run = load_report(tmp_path / "r")["runs"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for pid in run_pids(run):
        assert not pid_alive(pid)
    return run


@needs_tools
def test_a_lock_order_inversion_names_who_holds_what(tmp_path: Path, library: Path) -> None:
    run = run_program(tmp_path, library, "lib.flush_both(1)", "hung@run")
    finding = run["findings"][0]
    assert finding["kind"] == "lock-cycle", run["findings"]
    tids = [t["tid"] for t in finding["threads"]]
    assert len(tids) == 2 and len(set(tids)) == 2
    summary = finding["summary"]
    assert f"thread {tids[0]} waits for a mutex that thread {tids[1]} holds" in summary, summary
    assert f"thread {tids[1]} waits for a mutex that thread {tids[0]} holds" in summary, summary
    assert "flush_both (locks.c:" in summary and "other (locks.c:" in summary, summary


@needs_tools
def test_a_join_of_a_thread_that_waits_for_the_joiners_mutex(tmp_path: Path, library: Path) -> None:
    run = run_program(tmp_path, library, "lib.stop_drainer(1)", "hung@run")
    finding = run["findings"][0]
    assert finding["kind"] == "lock-cycle", run["findings"]
    joiner, drainer = (t["tid"] for t in finding["threads"])
    summary = finding["summary"]
    assert f"thread {joiner} joins thread {drainer}, in stop_drainer (locks.c:" in summary, summary
    assert f"thread {drainer} waits for a mutex that thread {joiner} holds, in drainer (locks.c:" in summary


@needs_tools
def test_a_condition_nothing_can_signal_is_named_as_such(tmp_path: Path, library: Path) -> None:
    run = run_program(tmp_path, library, "lib.wait_until_ready(0)", "hung@run")
    finding = run["findings"][0]
    assert finding["kind"] == "hang", run["findings"]
    assert "it waits for a condition: nobody in this process: it is its only thread" in finding["summary"]
    assert finding["hint"].startswith("Nothing in process "), finding["hint"]


@needs_tools
@pytest.mark.parametrize("call", ["lib.flush_both(0)", "lib.stop_drainer(0)", "lib.wait_until_ready(1)"])
def test_the_same_programs_in_order_pass(tmp_path: Path, library: Path, call: str) -> None:
    run = run_program(tmp_path, library, call, "passed")
    assert run["outcome"] == "passed"


CHANNEL = """
class Channel:
    def __init__(self):
        self.me = self  # a cycle: only a collection frees it, here the last one, in finalization
        lib.start_poller()

    def __del__(self):
        lib.join_poller()


Channel()
"""


@needs_tools
def test_a_destructor_joining_its_poller_at_finalization_hangs_in_exit(tmp_path: Path, library: Path) -> None:
    run = run_program(tmp_path, library, CHANNEL, "hung@exit")
    finding = run["findings"][0]
    assert finding["kind"] == "hang", run["findings"]
    summary = finding["summary"]
    assert "join_poller (locks.c:" in summary and "__del__" in summary, summary
    assert "it waits for a join, inside a destructor run by the garbage collector, during finalization" in summary
    assert "which itself waits for a signal (pause)" in summary, summary
    assert finding["hint"].startswith("The thread being joined is not ending"), finding["hint"]



# A Cython-like extension module: its functions are static, so a stripped build names none of them, and Python
# calls them through the interpreter's method machinery.
EXPORTER = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <time.h>
static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static void __attribute__((noinline)) export_until_stopped(void) {  /* nothing ever stops it */
    pthread_mutex_lock(&guard);
    for (;;) {
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_sec += 1;
        pthread_cond_timedwait(&wake, &guard, &at);
    }
}
static PyObject *run_exporter(PyObject *self, PyObject *unused) {
    Py_BEGIN_ALLOW_THREADS
    export_until_stopped();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"run_exporter", run_exporter, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exporter", NULL, -1, methods};
PyMODINIT_FUNC PyInit__exporter(void) { return PyModule_Create(&module); }
"""


@needs_tools
def test_a_non_daemon_thread_in_a_stripped_extension_is_named_by_its_library(tmp_path: Path) -> None:
    """The thread the exit waits for sits in an extension without symbols (as grpc's Cython export thread
    did): the finding names that module ("called from ?? in _exporter...so"), not only libc's wait and
    threading.py."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = build_shared_library(tmp_path, f"_exporter{suffix}", EXPORTER, "-O2", "-s",
                                 f"-I{sysconfig.get_paths()['include']}")
    code = (f"import sys, threading\nsys.path.insert(0, {str(tmp_path)!r})\nimport _exporter\n"
            f"threading.Thread(target=_exporter.run_exporter, name='exporter').start()\n")
    run = run_program(tmp_path, built, code, "hung@exit")
    finding = run["findings"][0]
    assert finding["kind"] == "exit-waits-for-thread", run["findings"]
    assert f"called from ?? in _exporter{suffix}" in finding["summary"], finding["summary"]
