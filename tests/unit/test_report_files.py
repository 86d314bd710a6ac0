"""report.json lists every run from results.jsonl, in order, one run at a time: the same text the whole report
dumped at once gave, whatever order the runs finished in."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import Event, Finding, RunResult, SeriesSummary, Session
from lifeguard.report.files import SCHEMA_VERSION, JsonlSink, report_dict, write_report

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")


def result(scenario: str, variant: str, index: int) -> RunResult:
    crashed = index % 3 == 1
    return RunResult(
        scenario=scenario, variant=variant, index=index, outcome=Outcome.CRASHED if crashed else Outcome.PASSED,
        phase=Phase.EXIT if crashed else None, expected="crashed@exit", signal=11 if crashed else None,
        exit_code=None if crashed else 0, duration=0.1 * index, python="3.11.7",
        run_dir=f"/runs/{scenario}-{variant}-{index}", reason="killed by SIGSEGV\nline two" if crashed else "",
        events=(Event("body-end", 5, 1.25, {"exit": None, "nested": {"a": [1, 2.5, "é"]}}),),
        findings=(Finding("crash", "SIGSEGV in f", "fix it", details={"k": [1, {"x": None}]}),) if crashed else (),
    )


def session_of(runs: list[RunResult]) -> Session:
    return Session(interpreter=PYTHON, scenarios=[], results=runs, finished=len(runs), duration=3.25,
                   summaries=[SeriesSummary("a", "buggy", "crashed@exit", 2, {"passed": 2}, Verdict.UNEXPECTED)])


def test_report_json_from_results_jsonl_is_the_whole_report_dumped_at_once(tmp_path: Path) -> None:
    runs = [result(s, v, i) for s in ("b", "a") for v in ("fixed", "buggy") for i in range(7)]
    finished = random.Random(3).sample(runs, len(runs))  # as -j finishes them
    sink = JsonlSink(tmp_path / "results.jsonl")
    session = session_of(finished)
    for run in finished:
        sink.result(run)
    sink.finish(session)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(text)["index"] for text in lines] == [r.index for r in finished]  # streamed as they finished
    write_report(tmp_path / "report.json", session, sink.runs_in_order())
    ordered = sorted(runs, key=lambda r: (r.scenario, r.variant, r.index))
    whole = {**report_dict(session), "runs": [r.to_dict() for r in ordered]}
    text = (tmp_path / "report.json").read_text()
    assert text == json.dumps(whole, indent=1, default=str)
    report = json.loads(text)
    assert report["schema_version"] == SCHEMA_VERSION
    assert [RunResult.from_dict(r) for r in report["runs"]] == ordered


def test_a_report_without_runs(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "results.jsonl")
    session = session_of([])
    sink.finish(session)
    write_report(tmp_path / "report.json", session, sink.runs_in_order())
    assert (tmp_path / "report.json").read_text() == json.dumps(report_dict(session), indent=1, default=str)
    assert json.loads((tmp_path / "report.json").read_text())["runs"] == []
    assert not (tmp_path / "report.json.tmp").exists()


def test_one_run(tmp_path: Path) -> None:
    run = replace(result("a", "buggy", 1), notes=("gdb is not installed",))
    sink = JsonlSink(tmp_path / "results.jsonl")
    sink.result(run)
    sink.finish(session_of([run]))
    write_report(tmp_path / "report.json", session_of([run]), sink.runs_in_order())
    assert json.loads((tmp_path / "report.json").read_text())["runs"] == [json.loads(json.dumps(run.to_dict()))]
