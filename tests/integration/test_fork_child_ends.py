"""A forked child's end is evidence: the kernel's word on how each child of the program ended, whoever reaped
it (lifeguard.child.fork_ends). Real programs under the real CLI: a child that dies of a crash signal with no
Python fatal error and no core is a crash of the fork-child, reaped by the program or left a zombie; a child a
library killed explains the program's failure; a pool's terminate() is no failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import load_report, run_cli

# faulthandler off in the child: no "Fatal Python error" line, so only the kernel saw the crash.
CRASHES_REAPED = """
import ctypes, faulthandler, os
pid = os.fork()
if pid == 0:
    faulthandler.disable()
    ctypes.string_at(0)
os.waitpid(pid, 0)
"""
CRASHES_NOT_REAPED = """
import ctypes, faulthandler, os, time
pid = os.fork()
if pid == 0:
    faulthandler.disable()
    ctypes.string_at(0)
def state():
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]
while state() != "Z":  # dead, never reaped by the program
    time.sleep(0.01)
"""
KILLED_BY_ITS_LIBRARY = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    print("mylib: fork() detected, terminating the child", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
_, status = os.waitpid(pid, 0)
sys.exit(3 if os.WIFSIGNALED(status) else 0)
"""
POOL_TERMINATED = """
import multiprocessing, time

context = multiprocessing.get_context("fork")
started = context.Semaphore(0)


def sleeper(_):
    started.release()
    time.sleep(60)


if __name__ == "__main__":
    with context.Pool(2) as pool:
        pool.map_async(sleeper, range(2), chunksize=1)
        for _ in range(2):
            assert started.acquire(timeout=60)  # both workers busy: __exit__'s terminate() sends them SIGTERM
"""


def run_of(tmp_path: Path, code: str) -> tuple[dict[str, Any], str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    proc = run_cli("run", "--report", str(tmp_path / "r"), str(script), cwd=tmp_path)
    return load_report(tmp_path / "r")["runs"][0], proc.stdout + proc.stderr


def kernel_ends(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in run["events"] if e["event"] == "fork-child-exit" and e.get("by") == "kernel"]


def test_a_child_that_crashed_without_a_word_is_a_crash_of_the_fork_child(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, CRASHES_REAPED)
    assert (run["outcome"], run["phase"], run["signal"]) == ("crashed", "fork-child", 11), run["reason"]
    assert "was killed by SIGSEGV" in run["reason"]
    assert "crashed@fork-child" in terminal


def test_a_child_left_a_zombie_is_read_without_reaping_it(tmp_path: Path) -> None:
    run, _ = run_of(tmp_path, CRASHES_NOT_REAPED)
    assert (run["outcome"], run["phase"]) == ("crashed", "fork-child"), run["reason"]
    assert [e["status"] for e in kernel_ends(run)] == [-11]


def test_a_child_its_library_killed_explains_the_programs_failure(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, KILLED_BY_ITS_LIBRARY)
    assert (run["outcome"], run["phase"]) == ("failed", "fork-child")
    assert "the forked child" in run["reason"] and "was killed by SIGTERM" in run["reason"]
    assert "on its own: no crash" not in terminal  # not the program's own verdict alone
    assert "mylib: fork() detected, terminating the child" in " ".join(f["summary"] for f in run["findings"])


def test_workers_a_pool_terminates_are_no_failure(tmp_path: Path) -> None:
    run, _ = run_of(tmp_path, POOL_TERMINATED)
    assert run["outcome"] == "passed", run["reason"]
    assert [e["status"] for e in kernel_ends(run)] == [-15, -15]  # both workers' ends were seen


REUSES_THE_DESCRIPTOR = """
import os

pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
for name in os.listdir("/proc/self/fd"):  # a program closing descriptors it did not open: lifeguard's pidfd
    try:
        if "pidfd" in os.readlink(f"/proc/self/fd/{name}"):
            os.close(int(name))
    except OSError:
        pass
out = open("out.txt", "w")  # takes the lowest free number: the pidfd's
pid = os.fork()
if pid == 0:
    out.write("the child wrote")
    out.flush()
    os._exit(0)
os.waitpid(pid, 0)
out.close()
with open("out.txt") as written:
    assert written.read() == "the child wrote"
"""


def test_a_descriptor_the_program_reused_is_never_closed(tmp_path: Path) -> None:
    run, _ = run_of(tmp_path, REUSES_THE_DESCRIPTOR)
    assert run["outcome"] == "passed", (run["reason"], run["stderr_tail"])
