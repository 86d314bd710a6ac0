"""A run lifeguard itself failed (outcome ``error``): built from a real exception, shown by every sink
(terminal, results.jsonl, report.json, junit.xml, report.html), and the session exits 3."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_INTERNAL, EXIT_UNEXPECTED
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult, Session
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.model.scenario import Scenario
from lifeguard.model.tally import SeriesTally
from lifeguard.report.files import JsonlSink, report_dict
from lifeguard.report.html import render
from lifeguard.report.junit import junit_xml
from lifeguard.report.terminal import TerminalSink
from lifeguard.run.engine import summarise
from lifeguard.run.own_error import disk_full, error_result
from lifeguard.session.setup import exit_code

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")
BODY = Scenario(name="body", function="body", path="/work/s.py", line=3, fixture=None,
                expect={"default": "passed"}, timeout=20.0, repeat={"*": 2})


def spec(tmp_path: Path, index: int) -> RunSpec:
    run_dir = tmp_path / f"body-default-{index}"
    run_dir.mkdir()
    return RunSpec(scenario="body", variant="default", index=index, kind=RunKind.FUNCTION, path=BODY.path,
                   function="body", code=None, interpreter=PYTHON, timeout=20.0, run_dir=run_dir, expected="passed")


def raised(exc: Exception) -> Exception:
    """``exc`` with a real traceback, as a worker catches it."""
    try:
        raise exc
    except Exception as caught:
        return caught


def crashed(tmp_path: Path) -> RunResult:
    return RunResult(scenario="body", variant="default", index=1, outcome=Outcome.CRASHED, phase=Phase.EXIT,
                     expected="passed", signal=6, exit_code=-6, duration=0.2, python="3.11.7",
                     run_dir=str(tmp_path / "body-default-1"), stderr_tail="Aborted\n", reason="killed by SIGABRT")


def session_of(results: list[RunResult]) -> Session:
    session = Session(PYTHON, [BODY], results=results)
    tally = SeriesTally(BODY, "default", BODY.expectation("default", PYTHON.short_version))
    for result in results:
        tally.add(result)
    session.summaries = summarise({("body", "default"): tally})
    session.finished = len(results)
    return session


def test_an_error_while_supervising_is_a_run_with_the_traceback(tmp_path: Path) -> None:
    result = error_result(spec(tmp_path, 0), raised(KeyError("events")), during="supervising")
    assert (result.outcome, result.phase, result.index, result.expected) == (Outcome.ERROR, None, 0, "passed")
    assert result.reason == "lifeguard failed supervising this run: KeyError: 'events'"
    assert "Traceback (most recent call last)" in result.notes[-1] and "in raised" in result.notes[-1]


def test_an_error_while_explaining_keeps_what_supervision_saw(tmp_path: Path) -> None:
    run = spec(tmp_path, 1)
    run.run_dir.rmdir()  # as a run that deleted its own folder leaves it
    result = error_result(run, raised(FileNotFoundError(2, "No such file or directory", "findings.txt")),
                          during="explaining", seen=crashed(tmp_path))
    assert result.outcome is Outcome.ERROR and result.phase is None
    assert (result.signal, result.exit_code, result.stderr_tail) == (6, -6, "Aborted\n")
    assert result.reason.startswith("lifeguard failed explaining a crashed@exit run: FileNotFoundError")
    assert result.reason.endswith("(the run's folder is gone: did the run delete it?)")


def test_a_full_disk_is_told_apart() -> None:
    assert disk_full(OSError(28, "No space left on device"))
    assert not disk_full(OSError(2, "No such file or directory")) and not disk_full(ValueError("x"))


@pytest.fixture
def with_error(tmp_path: Path) -> Session:
    error = error_result(spec(tmp_path, 1), raised(RuntimeError("a bug in a rule")), during="explaining",
                         seen=crashed(tmp_path))
    passed = RunResult(scenario="body", variant="default", index=0, outcome=Outcome.PASSED, phase=None,
                       expected="passed", signal=None, exit_code=0, duration=0.1, python="3.11.7", run_dir="")
    return session_of([passed, error])


def test_the_session_exits_3(with_error: Session) -> None:
    assert exit_code(with_error) == EXIT_INTERNAL
    assert not with_error.all_expected and with_error.summaries[0].counts == {"passed": 1, "error": 1}
    a_crash_instead = session_of([with_error.results[0], crashed(Path("/runs"))])
    assert exit_code(a_crash_instead) == EXIT_UNEXPECTED  # the scenario's failure: the verdict's code


def test_every_sink_shows_the_error(with_error: Session, tmp_path: Path) -> None:
    out = io.StringIO()
    terminal = TerminalSink(out, color="no")
    terminal.start(with_error, 2)
    terminal.finish(with_error)
    text = out.getvalue()
    assert "FAIL body[default]  2 runs: 1 passed, 1 error" in text
    assert "=== lifeguard's own errors: 1 run (exit code 3) ===" in text
    assert "lifeguard failed explaining a crashed@exit run: RuntimeError: a bug in a rule" in text
    assert text.rstrip().endswith("1 unexpected, 1 run failed by lifeguard's own error")

    jsonl = JsonlSink(tmp_path / "results.jsonl")
    for result in with_error.results:
        jsonl.result(result)
    jsonl.finish(with_error)
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [line["outcome"] for line in lines] == ["passed", "error"]

    report = report_dict(with_error)  # its runs are streamed in from results.jsonl (write_report)
    assert report["all_expected"] is False
    assert [r["outcome"] for r in jsonl.runs_in_order()] == ["passed", "error"]

    suite = ET.fromstring(junit_xml(with_error))
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    error = suite.find("testcase/error")
    assert error is not None and "lifeguard failed run 1" in error.get("message", "")
    assert "Traceback" in (error.text or "")

    assert "1 run(s) failed by lifeguard&#39;s own error" in render(with_error)


def test_a_session_stopped_by_lifeguard_is_not_green(with_error: Session) -> None:
    with_error.failure = "no space left on the disk of /r/results.jsonl"
    assert not with_error.all_expected
    suite = ET.fromstring(junit_xml(with_error))
    session_case = [case for case in suite.iter("testcase") if case.get("name") == "session"]
    assert session_case and "stopped by lifeguard's own error (no space left" in \
        session_case[0].find("error").get("message", "")  # type: ignore[union-attr]
    assert report_dict(with_error)["failure"] == with_error.failure
    out = io.StringIO()
    TerminalSink(out, color="no").finish(with_error)
    assert out.getvalue().rstrip().endswith("stopped early: no space left on the disk of /r/results.jsonl")
