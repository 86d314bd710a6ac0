"""What a program or a library printed before it went wrong is quoted, by the message's shape, for libraries no
table names: a fatal line before an abort, a warning about fork before a forked child's hang, a library that
kills its own forked child after saying why. Real programs under the real CLI; the messages are made up, so
no entry of diagnose/messages.py can be what finds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import load_report, run_cli

FATAL = "mylib: fatal: handle table corrupted, aborting"
ABORTS = f"""
import os, sys
print("mylib: starting 2 workers", file=sys.stderr)
print({FATAL!r}, file=sys.stderr, flush=True)
os.abort()
"""

WARNING = "mypool warning: fork() called while 2 pool threads run; the child may deadlock"
FORK_HANG = f"""
import os, sys, threading
cond = threading.Condition()
workers = [threading.Thread(target=lambda: cond.acquire() or cond.wait(), daemon=True) for _ in range(2)]
for worker in workers:
    worker.start()
print({WARNING!r}, file=sys.stderr, flush=True)
pid = os.fork()
if pid == 0:
    with cond:
        cond.wait()  # the pool's threads are not in the child: nobody notifies
    os._exit(0)
os.waitpid(pid, 0)
"""

TERMINATING = "Terminating: fork() called from a process already using mylib's runtime, this is unsafe."
KILLS_ITS_CHILD = f"""
import os, signal, sys
pid = os.fork()
if pid == 0:
    print({TERMINATING!r}, file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
_, status = os.waitpid(pid, 0)
sys.exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 3)
"""


def run_of(tmp_path: Path, code: str, *options: str) -> tuple[dict[str, Any], str]:
    script = tmp_path / "program.py"
    script.write_text(code)
    proc = run_cli("run", *options, "--report", str(tmp_path / "r"), str(script))
    return load_report(tmp_path / "r")["runs"][0], proc.stdout + proc.stderr


def quoted(run: dict[str, Any], line: str) -> dict[str, Any]:
    """The finding whose summary quotes ``line``, with its stderr line number in its evidence."""
    for finding in run["findings"]:
        if line in finding["summary"]:
            assert any(e.startswith("stderr line ") and line in e for e in finding["evidence"]), finding
            return finding
    raise AssertionError(f"no finding quotes {line!r}: {[f['summary'] for f in run['findings']]}")


def test_a_fatal_line_before_an_abort_is_quoted(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, ABORTS, "--expect", "crashed@run")
    assert run["outcome"] == "crashed"
    finding = quoted(run, FATAL)
    assert finding["kind"] == "crash"
    assert "stderr line 2:" in " ".join(finding["evidence"])  # the line that says why, not the one before it
    assert FATAL in terminal


def test_a_warning_about_fork_before_a_forked_childs_hang_is_quoted(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, FORK_HANG, "--expect", "hung@run", "--timeout", "5")
    assert run["outcome"] == "hung"
    quoted(run, WARNING)
    assert WARNING in terminal


def test_a_library_that_kills_its_forked_child_is_quoted(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, KILLS_ITS_CHILD, "--expect", "failed")
    assert run["outcome"] == "failed"
    quoted(run, TERMINATING)
    assert TERMINATING in terminal
