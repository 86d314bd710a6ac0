"""A deadlock between a garbage collection on a service thread and a library's global lock: the collector, in a
destructor, waits for the lock the main thread holds while the main thread joins the service thread. Real
programs under the CLI, with the lock a Python one and a C library's mutex (compiled here, called through
ctypes); the same programs joining without the lock held pass."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import load_report, run_cli

COMPILE_TIMEOUT = 120
REGISTRY = r"""
#include <pthread.h>
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;  /* a library's global lock */
void registry_lock(void) { pthread_mutex_lock(&registry); }
void registry_unlock(void) { pthread_mutex_unlock(&registry); }
void registry_remove(void) { pthread_mutex_lock(&registry); pthread_mutex_unlock(&registry); }
"""
PROGRAM = """
import ctypes, gc, sys, threading

LOCK = {lock!r}
if LOCK == "c":
    lib = ctypes.CDLL(sys.argv[1])
    take, release, remove = lib.registry_lock, lib.registry_unlock, lib.registry_remove
else:
    registry = threading.Lock()
    take, release = registry.acquire, registry.release
    def remove():
        with registry:
            pass
ready = threading.Event()


class Handle:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it

    def __del__(self):
        remove()  # the destructor unregisters the handle under the registry's lock


def service():
    Handle()
    ready.wait()
    gc.collect()


gc.disable()
worker = threading.Thread(target=service, name="service")
worker.start()
if {hold}:
    take()
ready.set()
worker.join()
if {hold}:
    release()
"""


def run_of(tmp_path: Path, lock: str, hold: bool) -> dict[str, Any]:
    source = tmp_path / "registry.c"
    source.write_text(REGISTRY)
    library = tmp_path / "libregistry.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-g", "-O1", "-o", str(library), str(source), "-lpthread"],
                   check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(lock=lock, hold=hold))
    run_cli("run", "--timeout", "5", "--report", str(tmp_path / "r"), str(script), str(library))
    return dict(load_report(tmp_path / "r")["runs"][0])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("lock", ["python", "c"])
def test_a_collector_waiting_for_the_lock_its_joiner_holds(tmp_path: Path, lock: str) -> None:
    run = run_of(tmp_path, lock, hold=True)
    assert (run["outcome"], run["phase"]) == ("hung", "run")
    finding = run["findings"][0]
    assert finding["kind"] == "gc-lock-deadlock", [f["summary"] for f in run["findings"]]
    summary = finding["summary"]
    assert "(service) runs a garbage collection" in summary and "__del__ (program.py:" in summary
    # A threading.Lock waits in PyThread_acquire_lock, from 3.13.8 in _PyMutex_LockTimed
    python_lock = "_PyMutex_LockTimed" if sys.version_info >= (3, 13, 8) else "PyThread_acquire_lock"
    assert ("pthread_mutex_lock" in summary or "lll_lock_wait" in summary) if lock == "c" else (
        python_lock in summary)
    assert "the collection began at service (program.py:" in summary
    assert "(main) waits for a thread to end" in summary


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_joining_without_the_lock_passes(tmp_path: Path) -> None:
    run = run_of(tmp_path, "c", hold=False)
    assert run["outcome"] == "passed", run["reason"]
