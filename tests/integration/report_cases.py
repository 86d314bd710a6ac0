"""A real session for the report.html tests: one `lifeguard run --report` of a crash, a hang, a flaky series
and a clean one (a scenario file), and a plain `-c` program that fails, so the page has every kind of evidence:
a core read by pystack, a hung tree's live stacks, a series that fails one run in three, and the code of a
`-c` run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import Pace, run_cli

CASES = '''
import ctypes
import os
import threading

import lifeguard


@lifeguard.scenario(timeout={timeout})
def reads_address_zero():
    """Dereferences NULL: a crash nobody expected."""
    ctypes.string_at(0)


@lifeguard.scenario(timeout={hang_timeout}, expect={{"default": "hung@run"}})
def joins_a_thread_that_waits_forever():
    """The main thread joins a worker that waits for an event nobody sets."""
    worker = threading.Thread(target=threading.Event().wait, name="waiter")
    worker.start()
    worker.join()


@lifeguard.scenario(timeout={timeout}, expect={{"default": "sometimes:crashed"}}, repeat={{"default": 12}})
def aborts_every_third_run():
    """A flaky series: runs 2, 5, 8 and 11 abort."""
    index = int(os.path.basename(os.getcwd()).rsplit("-", 1)[1])
    if index % 3 == 1:
        os.abort()


@lifeguard.scenario(timeout={timeout}, repeat={{"default": 3}})
def passes():
    pass
'''
CODE = "import sys; print('-c program <b>here</b>'); sys.exit(3)"
SERIES = 5  # the four scenarios and the -c program
RUNS = 1 + 1 + 12 + 3 + 1


def make_report(folder: Path, pace: Pace) -> Path:
    """The report folder of the session above, written into ``folder`` (the scenario file beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = folder / "cases.py"
    cases.write_text(CASES.format(timeout=pace.deadline_text(20), hang_timeout=pace.deadline_text(3)))
    report = folder / "report"
    proc = run_cli("run", "-q", "--report", str(report), str(cases), "-c", CODE, cwd=folder)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the crash and the -c program are unexpected
    return report


def runs_of(report: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (report / "results.jsonl").read_text().splitlines()]
