"""The shared text of reports, on constructed results: one run's evidence, one series' line, junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import Corruption, Finding, Leftover, RunResult, SeriesSummary, Session, ThreadRef
from lifeguard.model.run import StartMode
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack
from lifeguard.model.stats import series_stats
from lifeguard.report.junit import junit_xml
from lifeguard.report.text import EVIDENCE_LINES, evidence_text, summary_line

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")

PASSED = RunResult(scenario="pool", variant="buggy", index=0, outcome=Outcome.PASSED, phase=None,
                   expected="crashed@exit", signal=None, exit_code=0, duration=0.25, python="3.11.7",
                   run_dir="/runs/pool-buggy-0")
CRASHED = RunResult(
    scenario="pool", variant="buggy", index=1, outcome=Outcome.CRASHED, phase=Phase.EXIT, expected="crashed@exit",
    signal=11, exit_code=None, duration=1.5, python="3.11.7", run_dir="/runs/pool-buggy-1",
    reason="killed by SIGSEGV after the body returned",
    corruption=(Corruption(pid=41, message="frame header mangled", data_hex="00ff4142", data_len=4),),
    leftover_processes=(Leftover(pid=42, comm="sleep", ppid=1),),
    stderr_tail="".join(f"line {n}\n" for n in range(40)) + "Fatal Python error: Segmentation fault\n",
    python_stacks={"41": 'Current thread 0x00007f0000000001 (most recent call first):\n  File "s.py", line 9 in f\n'},
    backtraces=(ProcessStacks(pid=41, threads=(ThreadStack(41, "python", None, (Frame("tupledealloc"),)),)),),
    findings=(Finding("static-destructor-after-finalize", "FunctionPool::~FunctionPool released objects",
                      "unregister them at exit", threads=(ThreadRef(41, 41, "python", "crashed"),)),),
    notes=("gdb is not installed",), seed=7, mode=StartMode.FORK_FULL,
    replay="lifeguard run s.py::pool --seed 7 --variant buggy",
)


def test_a_run_in_one_line() -> None:
    assert str(CRASHED) == "pool[buggy]#1: crashed@exit (SIGSEGV) in 1.50s"
    assert str(PASSED) == "pool[buggy]#0: passed in 0.25s"


def test_evidence_text_of_a_crashed_run() -> None:
    text = evidence_text(CRASHED)
    lines = text.splitlines()
    assert lines[0] == "pool[buggy]#1: crashed@exit (SIGSEGV) in 1.50s: killed by SIGSEGV after the body returned"
    assert "mode: fork-server/full" in lines and "replay: lifeguard run s.py::pool --seed 7 --variant buggy" in lines
    assert "corruption (pid 41): frame header mangled" in lines and "  bytes: 00ff4142" in lines
    assert "leftover processes: 42 (sleep)" in lines
    # The stderr tail is cut to its last EVIDENCE_LINES lines.
    stderr = text.split("--- stderr (tail) ---\n", 1)[1].split("\nnote: ", 1)[0].splitlines()
    assert len(stderr) == EVIDENCE_LINES and stderr[-1] == "Fatal Python error: Segmentation fault"
    assert "--- Python stacks of pid 41 (faulthandler) ---" in lines
    assert any(line.startswith("--- stacks, culprit first") for line in lines)
    assert any("tupledealloc" in line for line in lines)
    # The findings come right after the why, before any stack.
    assert lines[1] == "finding [static-destructor-after-finalize] FunctionPool::~FunctionPool released objects"
    assert "finding [static-destructor-after-finalize] FunctionPool::~FunctionPool released objects" in lines
    assert "  fix: unregister them at exit" in lines
    assert "note: gdb is not installed" in lines
    assert lines[-1] == "evidence: /runs/pool-buggy-1"


def test_evidence_text_of_a_plain_run_says_only_what_there_is() -> None:
    assert evidence_text(PASSED) == "pool[buggy]#0: passed in 0.25s\nevidence: /runs/pool-buggy-0"


def test_long_stacks_are_never_cut_and_point_at_the_whole_text() -> None:
    frames = tuple(Frame(f"frame_{n}", library="/usr/lib/libfoo.so") for n in range(200))
    run = replace(PASSED, backtraces=(ProcessStacks(pid=5, threads=(ThreadStack(5, None, None, frames),)),),
                  evidence={"backtraces": "/runs/x/backtraces.txt"})
    text = evidence_text(run)
    assert "(every frame of every thread: /runs/x/backtraces.txt)" in text
    assert all(f"frame_{n} [libfoo.so]" in text for n in range(200))


def summary(runs: list[RunResult], verdict: Verdict, first_unexpected: RunResult | None = None) -> SeriesSummary:
    counts: dict[str, int] = {}
    for run in runs:
        key = f"{run.outcome}@{run.phase}" if run.phase else str(run.outcome)
        counts[key] = counts.get(key, 0) + 1
    return SeriesSummary(scenario="pool", variant="buggy", expected="crashed@exit", runs=len(runs), counts=counts,
                         verdict=verdict, first_unexpected=first_unexpected,
                         first_failure=next((r for r in runs if r.outcome is not Outcome.PASSED), None),
                         stats=series_stats([r.outcome is not Outcome.PASSED for r in runs],
                                            [r.duration for r in runs]), modes=("fork-server/full",),
                         duration=sum(r.duration for r in runs))


def test_summary_line_with_statistics_and_modes() -> None:
    line = summary_line(summary([PASSED, CRASHED], Verdict.UNEXPECTED, PASSED))
    assert line.splitlines() == [
        "FAIL pool[buggy]  2 runs: 1 passed, 1 crashed@exit  (expected crashed@exit) -> unexpected",
        "       under lifeguard, 1/2 runs failed: rate 50% (95% CI 9.5%-91%); first failure at run 2; "
        "run time p50 0.875s p90 1.375s max 1.500s",
        "       mode: fork-server/full",
    ]


def test_summary_line_of_a_single_expected_run() -> None:
    one = replace(summary([CRASHED], Verdict.EXPECTED), modes=("fresh",))
    assert summary_line(one) == "ok   pool[buggy]  1 run: 1 crashed@exit  (expected crashed@exit) -> expected"


def test_junit_from_the_summaries() -> None:
    session = Session(interpreter=PYTHON, scenarios=[], results=[CRASHED, PASSED], finished=3,
                      summaries=[summary([PASSED, CRASHED], Verdict.UNEXPECTED, PASSED),
                                 SeriesSummary("other", "default", "passed", 1, {"passed": 1}, Verdict.EXPECTED)],
                      duration=2.0)
    suite = ET.fromstring(junit_xml(session))
    assert (suite.get("tests"), suite.get("failures"), suite.get("time")) == ("2", "1", "2.000")
    failed = suite.find("testcase[@name='pool[buggy]']")
    assert failed is not None and failed.get("time") == "1.750"
    properties = {p.get("name"): p.get("value") for p in failed.iter("property")}
    assert properties["expected"] == "crashed@exit" and properties["count.crashed@exit"] == "1"
    assert properties["stats.bound"].startswith("under lifeguard, 1/2 runs failed")
    failure = failed.find("failure")
    assert failure is not None and failure.get("message") == "expected crashed@exit, got 1 passed, 1 crashed@exit"
    assert failure.text == evidence_text(PASSED)  # the first unexpected run's evidence
    passed = suite.find("testcase[@name='other[default]']")
    assert passed is not None and passed.find("failure") is None and passed.find("system-out") is None
    assert passed.find("properties") is None  # one run that passed: nothing to add


def test_a_junit_failure_message_carries_the_finding() -> None:
    """As pytest's junit message is the assertion, a failed series' is the first finding of its run."""
    crashed = replace(summary([CRASHED], Verdict.UNEXPECTED, CRASHED), expected="passed")
    session = Session(interpreter=PYTHON, scenarios=[], results=[CRASHED], finished=1, summaries=[crashed])
    failure = ET.fromstring(junit_xml(session)).find("testcase/failure")
    assert failure is not None and failure.get("message") == (
        "expected passed, got 1 crashed@exit: [static-destructor-after-finalize] FunctionPool::~FunctionPool "
        "released objects")
    no_finding = replace(crashed, first_unexpected=replace(CRASHED, findings=()))
    session = replace(session, summaries=[no_finding])
    failure = ET.fromstring(junit_xml(session)).find("testcase/failure")
    assert failure is not None and failure.get("message") == (
        "expected passed, got 1 crashed@exit: killed by SIGSEGV after the body returned")


def test_a_result_survives_its_json_form() -> None:
    assert RunResult.from_dict(json.loads(json.dumps(CRASHED.to_dict()))) == CRASHED
    data = CRASHED.to_dict()
    assert (data["outcome"], data["phase"], data["signal_name"], data["mode"]) == (
        "crashed", "exit", "SIGSEGV", "fork-server/full")


def test_a_series_label_never_repeats_the_variant_of_its_pytest_id() -> None:
    from lifeguard.model.result import series_label

    assert series_label("pool_outlives_interpreter", "buggy") == "pool_outlives_interpreter[buggy]"
    assert series_label("tests/test_x.py::test_x[buggy]", "buggy") == "tests/test_x.py::test_x[buggy]"
    assert series_label("tests/test_x.py::test_x[3-buggy]", "buggy") == "tests/test_x.py::test_x[3-buggy]"
    assert series_label("tests/test_x.py::test_x[buggyish]", "buggy") == "tests/test_x.py::test_x[buggyish][buggy]"
    assert series_label("tests/test_x.py::test_x[1]", "default") == "tests/test_x.py::test_x[1]"  # a pytest id
    assert series_label("script.py", "default") == "script.py[default]"


def test_a_c_programs_own_frames_are_not_hidden_as_the_bootstraps_line() -> None:
    from lifeguard.diagnose.view import trimmed_frames
    from lifeguard.model.stacks import Frame, ThreadStack

    frames = (Frame(function="wait", file="<string>", line=3, is_python=True),
              Frame(function="<module>", file="<string>", line=4, is_python=True),
              Frame(function="<lambda>", file="/x/lifeguard/child/plain.py", line=74, is_python=True),
              Frame(function="<module>", file="<string>", line=1, is_python=True),  # the bootstrap's -c line
              Frame(function="Py_BytesMain", library="libpython3.11.so.1.0"))
    shown, hidden = trimmed_frames(ThreadStack(tid=1, frames=frames))
    assert [f.line for f in shown if isinstance(f, Frame)] == [3, 4] and hidden == 3


def test_the_hidden_frames_note_names_only_what_was_hidden() -> None:
    from lifeguard.diagnose.view import hidden_parts
    from lifeguard.model.stacks import Frame

    native_thread = (Frame(function="start_thread", library="/lib/x86_64-linux-gnu/libc.so.6"),
                     Frame(function="clone3", library="/lib/x86_64-linux-gnu/libc.so.6"))
    assert hidden_parts(native_thread) == "the thread's start"
    plain_script = (Frame(function="<module>", file="/usr/lib/python3.11/runpy.py", line=88, is_python=True),
                    Frame(function="<lambda>", file="/x/lifeguard/child/plain.py", line=74, is_python=True),
                    Frame(function="<module>", file="<string>", line=1, is_python=True),
                    Frame(function="Py_BytesMain", library="libpython3.11.so.1.0"),
                    Frame(function="__libc_start_main", library="/lib/x86_64-linux-gnu/libc.so.6"))
    assert hidden_parts(plain_script) == "the interpreter's start-up, lifeguard's bootstrap"
    forked_test = (Frame(function="pytest_runtest_call", file="/v/_pytest/runner.py", line=10, is_python=True),
                   Frame(function="run_in_fork", file="/x/lifeguard/run/fork_here.py", line=62, is_python=True),
                   Frame(function="_multicall", file="/v/pluggy/_callers.py", line=5, is_python=True),
                   Frame(function="Py_RunMain", library="libpython3.11.so.1.0"))
    assert hidden_parts(forked_test) == "the interpreter's start-up, pytest's runner, lifeguard's bootstrap"
