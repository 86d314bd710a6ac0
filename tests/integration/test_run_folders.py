"""A session's passed runs' folders are recycled off the runs' own time (lifeguard.run.spares): emptied while a
later run's child starts and renamed into place for a run after it, so that neither removing a folder nor making
one lies between two runs. What a user sees is unchanged: a failed run's folder holds its own evidence, and no
passed run's folder is left in the report, in either start mode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import run_cli

# Each run notes the mark its folder carries (an extended attribute, which emptying a folder leaves and a new
# folder has not), then marks the folder with its own number; the fifth run fails.
SCENARIO = '''
import json, os
import lifeguard

LOG = {log!r}


@lifeguard.scenario(repeat=7, timeout=60, fork_server=True)
def marks():
    with open(LOG, "a+") as f:
        f.seek(0)
        number = len(f.readlines())
        try:
            found = os.getxattr(".", "user.lifeguard-test").decode()
        except OSError:
            found = None
        f.write(json.dumps({{"number": number, "found": found, "folder": os.getcwd()}}) + "\\n")
    os.setxattr(".", "user.lifeguard-test", str(number).encode())
    if number == 4:
        raise SystemExit(3)
'''


@pytest.mark.parametrize("mode", ["fresh", "fork-server"])
def test_passed_runs_folders_are_recycled_and_none_is_left(tmp_path: Path, mode: str) -> None:
    try:
        os.setxattr(tmp_path, "user.lifeguard-probe", b"1")
    except OSError as exc:
        pytest.skip(f"no user extended attributes on this file system: {exc}")
    log = tmp_path / "log.jsonl"
    path = tmp_path / "marks.py"
    path.write_text(SCENARIO.format(log=str(log)))
    report = tmp_path / "report"
    proc = run_cli("run", str(path), "--report", str(report), "--mode", mode, "-j", "1", "--no-native")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the failed run is unexpected
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [run["number"] for run in runs] == list(range(7))
    # A later run's folder was an earlier passed run's: its mark is there (never the failed run's).
    recycled = [run for run in runs if run["found"] is not None]
    assert recycled, runs
    assert all(int(run["found"]) < run["number"] and run["found"] != "4" for run in recycled), runs
    assert all(run["folder"] != runs[int(run["found"])]["folder"] for run in recycled), runs  # renamed into place
    # Only the failed run's folder is left, with its own evidence.
    left = sorted(p for p in (report / "runs").rglob("*") if p.is_dir() and (p / "events.txt").exists())
    assert [p.resolve() for p in left] == [Path(runs[4]["folder"]).resolve()], left
    events = (left[0] / "events.txt").read_bytes()
    assert b'"event": "started"' in events and b'"exit": "3"' in events, events  # its own run's, whole
