"""A fork hang in a thread pool no table names: a small C++ pool of this test's own (std::thread workers, a
condition variable), used in the parent, then in a forked child, which waits for workers that stayed in the
parent. fork-runtime must explain it from the shape of the evidence alone, also with every table switched off
(LIFEGUARD_BLIND=all), and the same program with the pool made after the fork must pass."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lifeguard.capture import gdb_available
from tests.helpers import COMPILE_TIMEOUT, build_shared_library, load_report, run_cli

POOL = r"""
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <unistd.h>
#include <thread>
#include <vector>

namespace mypool {
struct Pool {
    std::mutex mutex;
    std::condition_variable work, done;
    int pending = 0, generation = 0;
    std::vector<std::thread> workers;

    void serve() {
        int seen = 0;
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
            work.wait(lock, [&] { return generation != seen; });
            seen = generation;
            if (--pending == 0) done.notify_all();
        }
    }
    void run_all() {  // every worker takes one step; the caller waits until all did
        std::unique_lock<std::mutex> lock(mutex);
        pending = static_cast<int>(workers.size());
        ++generation;
        work.notify_all();
        done.wait(lock, [&] { return pending == 0; });
    }
};
Pool *pool;
}  // namespace mypool

static pid_t started_in;
extern "C" void pool_start(int threads) {
    started_in = getpid();
    mypool::pool = new mypool::Pool;
    for (int i = 0; i < threads; ++i) mypool::pool->workers.emplace_back([] { mypool::pool->serve(); });
}
extern "C" void pool_run() { mypool::pool->run_all(); }
extern "C" void pool_run_checked() {  // as some runtimes do: refuse to run in a forked child, and end it
    if (getpid() != started_in) {
        std::fprintf(stderr, "mypool: fork() called after the pool started, this is unsafe; terminating\n");
        std::raise(SIGTERM);
    }
    mypool::pool->run_all();
}
"""
PROGRAM = """
import ctypes, os, sys
pool = ctypes.CDLL({library!r})
{before}
pool.pool_run()
pid = os.fork()
if pid == 0:
    {in_child}
    pool.pool_run()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""

needs_tools = pytest.mark.skipif(shutil.which("g++") is None or gdb_available() is None,
                                 reason="needs g++ and a native stack reader")


def build(tmp_path: Path) -> Path:
    return build_shared_library(tmp_path, "libmypool.so", POOL, compiler="g++")


def run_of(tmp_path: Path, code: str, *options: str, blind: bool = False) -> tuple[dict[str, Any], str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    env = {**os.environ, "LIFEGUARD_BLIND": "all"} if blind else None
    proc = run_cli("run", *options, "--report", str(tmp_path / "r"), str(script), env=env)
    return load_report(tmp_path / "r")["runs"][0], proc.stdout + proc.stderr


@needs_tools
@pytest.mark.parametrize("blind", [False, True], ids=["informed", "blind"])
def test_a_forked_child_waiting_for_a_pool_of_its_own(tmp_path: Path, blind: bool) -> None:
    library = build(tmp_path)
    code = PROGRAM.format(library=str(library), before="pool.pool_start(2)", in_child="pass")
    run, terminal = run_of(tmp_path, code, "--expect", "hung@fork-child", "--timeout", "5", blind=blind)
    assert (run["outcome"], run["phase"]) == ("hung", "fork-child")
    finding = next(f for f in run["findings"] if f["kind"] == "fork-runtime")
    summary = finding["summary"]
    assert "a pool in libmypool.so" in summary and "mypool::Pool::run_all" in summary, summary
    assert "2 of them libmypool.so worker(s)" in summary and "none of them exists in the child" in summary
    assert "'spawn'" in finding["hint"]
    assert "[fork-runtime]" in terminal and "mypool::Pool::run_all" in terminal


@needs_tools
@pytest.mark.parametrize("blind", [False, True], ids=["informed", "blind"])
def test_a_forked_child_its_pool_library_ends(tmp_path: Path, blind: bool) -> None:
    """The child is killed by its own library's SIGTERM, and the parent exits with its status: its end (from the
    kernel), the library's words, the parent's threads at fork and the call that sent the SIGTERM (the child's
    stack, read while lifeguard's handler held the signal)."""
    library = build(tmp_path)
    code = PROGRAM.format(library=str(library), before="pool.pool_start(2)", in_child="pool.pool_run_checked()")
    run, terminal = run_of(tmp_path, code, "--expect", "failed@fork-child", "--timeout", "20", blind=blind)
    assert (run["outcome"], run["phase"]) == ("failed", "fork-child"), run["reason"]
    finding = run["findings"][0]
    assert finding["kind"] == "fork-runtime", run["findings"]
    assert "was killed by SIGTERM, which it sent itself from pool_run_checked (mypool.cpp:" in finding["summary"]
    assert "after a library said: \"mypool: fork() called after the pool started" in finding["summary"]
    assert "had 2 native thread(s) at fork" in finding["summary"], finding["summary"]
    assert finding["frames"][0].startswith("pool_run_checked"), finding["frames"]
    assert "[fork-runtime]" in terminal and "pool_run_checked" in terminal


@needs_tools
def test_the_pool_made_in_the_child_passes(tmp_path: Path) -> None:
    library = build(tmp_path)
    code = PROGRAM.format(library=str(library), before="pool.pool_start(2)", in_child="pool.pool_start(2)")
    run, _ = run_of(tmp_path, code, "--timeout", "20")
    assert run["outcome"] == "passed", run["reason"]


# The same pool's fork check in Rust: the library panics in the forked child; a panic cannot leave an
# extern "C" function, so Rust aborts the child (PyO3 bindings raise PanicException instead; the message is
# the same). Since Rust 1.73 the panic's message is on the line after its "panicked at" header.
RUST_POOL = r"""
use std::sync::atomic::{AtomicU32, Ordering};
static STARTED_IN: AtomicU32 = AtomicU32::new(0);

#[no_mangle]
pub extern "C" fn pool_start(threads: i32) {
    STARTED_IN.store(std::process::id(), Ordering::SeqCst);
    for _ in 0..threads {
        std::thread::spawn(|| loop { std::thread::park(); });
    }
}

#[no_mangle]
pub extern "C" fn pool_run() {}

#[no_mangle]
pub extern "C" fn pool_run_checked() {
    if std::process::id() != STARTED_IN.load(Ordering::SeqCst) {
        panic!("mypool: fork() called after the pool started; its threads are in the parent");
    }
}
"""


def _rustc() -> str | None:
    return shutil.which("rustc") or next((str(p) for p in [Path.home() / ".cargo" / "bin" / "rustc"]
                                          if p.is_file()), None)


@pytest.mark.skipif(_rustc() is None or gdb_available() is None, reason="needs rustc and a native stack reader")
@pytest.mark.parametrize("blind", [False, True], ids=["informed", "blind"])
def test_a_forked_child_its_rust_pool_panics_in(tmp_path: Path, blind: bool) -> None:
    source = tmp_path / "mypool.rs"
    source.write_text(RUST_POOL)
    library = tmp_path / "libmypool.so"
    subprocess.run([str(_rustc()), "--edition", "2021", "--crate-type", "cdylib", "-g", "-C", "opt-level=1",
                    "-o", str(library), str(source)], check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    code = PROGRAM.format(library=str(library), before="pool.pool_start(2)", in_child="pool.pool_run_checked()")
    run, terminal = run_of(tmp_path, code, "--expect", "crashed@fork-child", "--timeout", "20", blind=blind)
    assert (run["outcome"], run["phase"]) == ("crashed", "fork-child"), run["reason"]
    finding = run["findings"][0]
    assert finding["kind"] == "fork-runtime", run["findings"]
    summary = finding["summary"]
    assert "was killed by SIGABRT in mypool::pool_run_checked (mypool.rs:" in summary, summary
    assert "panicked at" in summary and "mypool: fork() called after the pool started" in summary, summary
    assert "had 2 native thread(s) at fork" in summary, summary
    assert "[fork-runtime]" in terminal and "pool_run_checked" in terminal
