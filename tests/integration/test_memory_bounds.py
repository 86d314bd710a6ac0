"""A child may write anything on its result channel: the supervisor reads it within bounds. A real child writes
one 300 MiB line (and thousands of notes, a 4 MiB corruption message and a 4 MiB exception); the supervisor's
peak memory stays far below the line, and report.json and results.jsonl stay small."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.model.result import MESSAGE_CHARS, REASON_CHARS
from lifeguard.run.channel import EVENT_LINE_BYTES
from tests.helpers import CLI_TIMEOUT, ROOT, Pace, load_report, real_python

LINE_MIB = 300
FLOOD = '''
import os

import lifeguard
from lifeguard import child

@lifeguard.scenario(timeout={timeout}, expect={{"default": "corrupted@run"}})
def floods_the_result_channel():
    # One note line of {mib} MiB, written in 1 MiB chunks straight to the result channel (as child.emit would
    # write it in one go, were the child willing to hold it).
    fd = int(os.environ["{fd_env}"])
    os.write(fd, ("{{'event': 'note', 'pid': %d, 'time': 1.0, 'message': '" % os.getpid()).encode())
    chunk = b"x" * (1 << 20)
    for _ in range({mib}):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]
    os.write(fd, b"'}}\\n")
    for n in range(5000):
        child.note(f"note {{n}} " + "y" * 500)
    child.report_corruption("z" * (4 << 20), b"\\x00" * 1000)
    raise RuntimeError("w" * (4 << 20))
'''
# Runs lifeguard's CLI in this process and records its peak resident memory (VmHWM) when it is done.
MEASURED_CLI = '''
import sys

from lifeguard.cli.main import main

try:
    code = main(sys.argv[2:])
finally:
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:"))
    with open(sys.argv[1], "w") as out:
        out.write(peak.split()[1])  # kB
sys.exit(code)
'''


def bounded(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` with lifeguard importable, in a child of its own session, killed whole at CLI_TIMEOUT."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([real_python(), *argv], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        raise AssertionError(f"{' '.join(argv)} did not finish in {CLI_TIMEOUT} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def measured_cli(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``lifeguard ARGS``, bounded; its exit and its peak RSS in bytes."""
    script = folder / "measured_cli.py"
    script.write_text(MEASURED_CLI)
    peak_file = folder / "peak.txt"
    proc = bounded(folder, str(script), str(peak_file), *args)
    return proc, int(peak_file.read_text()) * 1024


def test_a_300_mib_line_stays_out_of_the_supervisors_memory_and_reports(tmp_path: Path, pace: Pace) -> None:
    scenario = tmp_path / "flood.py"
    scenario.write_text(FLOOD.format(timeout=pace.deadline_text(60), mib=LINE_MIB, fd_env=protocol.EVENTS_FD_ENV))
    report = tmp_path / "r"
    try:
        proc, peak = measured_cli(tmp_path, "run", str(scenario), "--report", str(report), "-q", "--no-native")
        assert proc.returncode == 0, proc.stdout + proc.stderr  # corrupted@run, as expected
        line_bytes = LINE_MIB << 20
        # Holding the line once would take 300 MiB; the old reader's literal_eval took 2.4 GB.
        assert peak < line_bytes // 3, f"supervisor peak RSS {peak >> 20} MiB"
        sizes = {name: (report / name).stat().st_size for name in ("report.json", "results.jsonl", "junit.xml",
                                                                   "report.html")}
        assert all(size < 1 << 20 for size in sizes.values()), sizes
        run = load_report(report)["runs"][0]
        assert (run["outcome"], run["phase"]) == ("corrupted", "run")
        cut = [e for e in run["events"] if e.get("cut")]
        assert len(cut) >= 1 and cut[0]["event"] == "note" and cut[0]["cut"] > line_bytes
        assert len(cut[0]["message"]) < EVENT_LINE_BYTES + 100
        assert len(run["reason"]) <= REASON_CHARS and len(run["corruption"][0]["message"]) <= MESSAGE_CHARS
        assert any("result channel:" in note and "dropped" in note and "cut" in note for note in run["notes"])
        lines = (report / "results.jsonl").read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["events"] == run["events"]
    finally:  # the run's folder holds the 300 MiB events file: it goes now, not with pytest's old temp folders
        shutil.rmtree(report / "runs", ignore_errors=True)


EVERY_FOURTH_FAILS = '''
import os

import lifeguard

@lifeguard.scenario(timeout={timeout}, fork_server=True, expect={{"default": "passed"}}, repeat={{"default": 12}})
def every_fourth_run_fails():
    index = int(os.path.basename(os.getcwd()).rsplit("-", 1)[1])  # the run's folder: <name>-<variant>-<index>
    if index % 4 == 3:
        raise SystemExit(3)
'''
# The engine in a child of its own (it makes its process a subreaper), keeping at most 2 runs in memory.
ENGINE_SESSION = '''
import json
import sys
from pathlib import Path

from lifeguard.session.setup import SessionSetup, run_session
from lifeguard.interpreter import resolve
from lifeguard.plan.discover import discover
from lifeguard.plan.scheduler import PlanOptions
from lifeguard.run import sink

sink.RUNS_KEPT = 2
session = run_session(discover([sys.argv[1]]), PlanOptions(),
                      SessionSetup(resolve(), jobs=2, terminal=False, report_dir=Path(sys.argv[2])))
summary = session.summaries[0]
print(json.dumps({"finished": session.finished, "kept": [r.index for r in session.results],
                  "first_unexpected": summary.first_unexpected.index, "first_failure": summary.first_failure.index,
                  "counts": summary.counts, "verdict": summary.verdict.value,
                  "failures": summary.stats.failures, "first_failure_at": summary.stats.runs_to_first_failure}))
'''


def test_a_session_keeps_only_evidence_and_report_json_still_lists_every_run(tmp_path: Path, pace: Pace) -> None:
    scenario = tmp_path / "fourth.py"
    scenario.write_text(EVERY_FOURTH_FAILS.format(timeout=pace.deadline_text(20)))
    script = tmp_path / "engine_session.py"
    script.write_text(ENGINE_SESSION)
    proc = bounded(tmp_path, str(script), str(scenario), str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    # 12 runs finished, 3 failed; only the first 2 failures that finished are held, no passing run.
    assert seen["finished"] == 12 and len(seen["kept"]) == 2 and set(seen["kept"]) <= {3, 7, 11}, seen
    assert (seen["first_unexpected"], seen["first_failure"], seen["first_failure_at"]) == (3, 3, 4), seen
    assert seen["counts"] == {"passed": 9, "failed": 3} and seen["failures"] == 3 and seen["verdict"] == "unexpected"
    report = load_report(tmp_path / "r")
    assert [(r["index"], r["outcome"]) for r in report["runs"]] == [
        (i, "failed" if i % 4 == 3 else "passed") for i in range(12)]
    assert all(r["exit_code"] == 3 for r in report["runs"] if r["outcome"] == "failed")
    assert report["summaries"][0]["runs"] == 12
    assert len((tmp_path / "r" / "results.jsonl").read_text().splitlines()) == 12
