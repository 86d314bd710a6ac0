"""Which thread ran a garbage collection is told by the kernel's thread id, not threading's: under gevent's
monkey-patching, threading's idents are greenlets', and every collection on the main thread used to be recorded
as one on another thread (what made wrong-thread-gc blame "MainThread"). A real gevent program under the CLI."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.helpers import load_report, run_cli

PROGRAM = """
from gevent import monkey

monkey.patch_all()

import gc
import sys

start_new_thread = monkey.get_original("_thread", "start_new_thread")
allocate_lock = monkey.get_original("_thread", "allocate_lock")
get_native_id = monkey.get_original("_thread", "get_native_id")


class Cycle:
    def __init__(self):
        self.me = self


for _ in range(3):
    Cycle()
    gc.collect()  # on the main thread, under gevent's thread idents

done = allocate_lock()
done.acquire()
seen = []


def collect_on_a_real_thread():
    seen.append(get_native_id())
    Cycle()
    gc.collect()
    done.release()


start_new_thread(collect_on_a_real_thread, ())
done.acquire()
print("collector", seen[0], file=sys.stderr)
"""


@pytest.mark.skipif(importlib.util.find_spec("gevent") is None,
                    reason="gevent is not installed (the test extra has it; a free-threaded interpreter's "
                           "test-freethreaded extra cannot build it)")
def test_collections_are_placed_by_kernel_thread_id_under_gevent(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    run_cli("run", "--report", str(tmp_path / "r"), str(script))
    run = load_report(tmp_path / "r")["runs"][0]
    assert run["outcome"] == "passed", run["reason"]
    found = re.search(r"collector (\d+)", run["stderr_tail"])
    assert found, run["stderr_tail"]
    foreign = [e for e in run["events"] if e["event"] == "gc-foreign-thread"]
    assert [e["thread"] for e in foreign] == [int(found.group(1))]  # the real thread's one, none of main's
