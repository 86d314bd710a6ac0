"""report.html from result objects (no process: the runs here are made, the real ones are in
tests/integration/test_report_html.py): hostile text shown and inert, the runs' table as one JSON array,
verdicts in order, links relative to the report folder, the charts of repeated series, the finding and
culprit frame of failing ones, a pytest session's hundreds of series."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding, RunResult, Session, ThreadRef
from lifeguard.model.scenario import Scenario
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import Backend, Frame, ProcessStacks, ThreadStack
from lifeguard.model.tally import SeriesTally
from lifeguard.report.files import JsonlSink
from lifeguard.report.html import render
from lifeguard.report.html_evidence import harness_lines, href

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")
HOSTILE = "<script>alert(1)</script> esc\x1b[2J nul\x00 vt\x0b bel\x07 fffe\ufffe rlo\u202e surrogate\udcff"
# What the page shows of HOSTILE: markup escaped, every control shown as its escape.
SHOWN = ("&lt;script&gt;alert(1)&lt;/script&gt; esc\\x1b[2J nul\\x00 vt\\x0b bel\\x07 fffe\\ufffe rlo\\u202e "
         "surrogate\\xff")
RAW_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff\u202e]")
# A faulthandler dump as a crashed -c run left it (tests/integration saw this one): the program's frames, then
# lifeguard's bootstrap under them, ending with the bootstrap's own -c line.
DUMP = '''Fatal Python error: Segmentation fault

Current thread 0x00007f4a4b1bfb80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "<string>", line 1 in <module>
  File "/root/.cache/lifeguard/childpath/7e9d84e1/lifeguard/child/plain.py", line 74 in <lambda>
  File "/root/.cache/lifeguard/childpath/7e9d84e1/lifeguard/child/bootstrap.py", line 254 in _run_body
  File "/root/.cache/lifeguard/childpath/7e9d84e1/lifeguard/child/bootstrap.py", line 167 in main
  File "<string>", line 1 in <module>
'''


def scenario(name: str, expect: str = "passed", code: str | None = None) -> Scenario:
    return Scenario(name=name, function="body", path="", line=0, fixture=None, expect={"default": expect},
                    timeout=20.0, repeat={"*": 1}, code=code, kind="code" if code else "function")


def crashed(name: str, index: int, run_dir: Path, reason: str = "killed by SIGSEGV") -> RunResult:
    main = ThreadStack(tid=10, name="python", frames=(
        Frame("raise", "raise.c", 26, "/lib/libc.so.6", "0x1"),
        Frame("free_pool", "pool.cpp", 40, "/x/ext.so", "0x2"),
        Frame("body", "/work/case.py", 7, is_python=True),
        Frame("_PyEval_EvalFrameDefault", "ceval.c", 1, "/usr/lib/libpython3.11.so.1.0", "0x3"),
        Frame("main", "/x/lifeguard/child/bootstrap.py", 167, is_python=True),
        Frame("__libc_start_main", None, None, "/lib/libc.so.6", "0x4")))
    other = ThreadStack(tid=11, name=HOSTILE, frames=(Frame("futex_wait", None, None, "/lib/libc.so.6", "0x5"),))
    process = ProcessStacks(pid=10, threads=(other, main), backend=Backend.PYSTACK_CORE,
                            signal=SignalInfo("SIGSEGV", 11, 1, "0x0", tid=10))
    finding = Finding("crash", f"crashed: {HOSTILE}", "read the frames", (ThreadRef(10, 10, "python", "crashed"),),
                      ("free_pool at pool.cpp:40",), {}, (HOSTILE,))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "stderr.txt").write_text("")
    (run_dir / "core.10").write_text("")
    return RunResult(scenario=name, variant="default", index=index, outcome=Outcome.CRASHED, phase=Phase.RUN,
                     expected="passed", signal=11, exit_code=-11, duration=0.25, python="3.11.7", run_dir=str(run_dir),
                     reason=reason, evidence={"stderr.txt": str(run_dir / "stderr.txt")}, stderr_tail=DUMP,
                     backtraces=(process,), findings=(finding,), notes=(HOSTILE,), seed=7,
                     replay=f"lifeguard run {HOSTILE}")


def passed(name: str, index: int) -> RunResult:
    return RunResult(scenario=name, variant="default", index=index, outcome=Outcome.PASSED, phase=None,
                     expected="passed", signal=None, exit_code=0, duration=0.1, python="3.11.7", run_dir="")


def page_of(tmp_path: Path, results: list[RunResult], scenarios: list[Scenario]) -> tuple[str, Session]:
    """The page as ReportDirSink writes it: its runs read back from results.jsonl."""
    session = Session(PYTHON, scenarios)
    tallies = {s.name: SeriesTally(s, "default", s.expectation("default", PYTHON.short_version)) for s in scenarios}
    sink = JsonlSink(tmp_path / "results.jsonl")
    for result in results:
        tallies[result.scenario].add(result)
        sink.result(result)
        if tallies[result.scenario].is_evidence(result):
            session.results.append(result)
    sink.finish(session)
    session.summaries = [t.summary() for t in tallies.values()]
    session.finished = len(results)
    return render(session, sink.runs_in_order(), tmp_path), session


def table_of(page: str) -> dict[str, object]:
    match = re.search(r'<script type="application/json" id="lg-runs">(.*?)</script>', page, re.S)
    assert match is not None
    data: dict[str, object] = json.loads(match.group(1))
    return data


def test_hostile_text_is_shown_and_inert(tmp_path: Path) -> None:
    name = f"case {HOSTILE}"
    page, _ = page_of(tmp_path, [passed(name, 0), crashed(name, 1, tmp_path / "runs" / "c-1", reason=HOSTILE)],
                      [scenario(name, code=f"print('{HOSTILE}')")])
    page.encode("utf-8")  # no lone surrogate: the file is valid UTF-8
    assert not RAW_CONTROLS.search(page)
    assert page.count("<script") == 2 and "<script>alert" not in page  # the page's own two, no more
    assert page.count(SHOWN) >= 6  # name, reason, finding, its evidence, note, replay, the -c code, a thread
    island = re.search(r'id="lg-runs">(.*?)</script>', page, re.S)
    assert island is not None and "<" not in island.group(1) and "&" not in island.group(1)  # as \u003c, \u0026
    data = table_of(page)
    series = data["series"]
    assert isinstance(series, list) and series[0][1].startswith("case <script>alert(1)</script> esc\\x1b[2J")


def test_every_template_value_has_controls_shown_even_unfiltered(tmp_path: Path) -> None:
    """The series' expectation and description reach the page without the `shown` filter: the environment's
    finalize still shows their controls."""
    hostile = Scenario(name="s", function="body", path="", line=0, fixture=None, expect={"default": "passed"},
                       timeout=20.0, repeat={"*": 1}, description=f"about {HOSTILE}")
    page, _ = page_of(tmp_path, [crashed("s", 0, tmp_path / "runs" / "s-0")], [hostile])
    assert f'title="about {SHOWN}"' in page and f"<p>about {SHOWN}</p>" in page
    assert not RAW_CONTROLS.search(page)


def test_unexpected_series_come_first_and_the_table_lists_every_run(tmp_path: Path) -> None:
    results = [passed("clean", i) for i in range(5)] + [passed("flaky", 0), crashed("flaky", 1, tmp_path / "f1"),
                                                        passed("flaky", 2)]
    page, session = page_of(tmp_path, results, [scenario("clean"), scenario("flaky")])
    assert page.index('data-name="flaky[default]"') < page.index('data-name="clean[default]"')
    assert "lifeguard report: 1 unexpected of 2 series" in page
    data = table_of(page)
    rows, words = data["rows"], data["words"]
    assert isinstance(rows, list) and isinstance(words, list) and len(rows) == len(results)
    crashed_rows = [r for r in rows if words[r[2]] == "crashed"]
    assert [(r[0], r[1], r[9]) for r in crashed_rows] == [(1, 1, 0)]  # series 1 (flaky), run index 1, unexpected
    assert crashed_rows[0][8] == "f1/"  # its folder, relative to the report folder
    assert 'id="r1-1"' in page  # its evidence, which the table links to


def test_culprit_thread_open_and_lifeguards_frames_marked(tmp_path: Path) -> None:
    page, _ = page_of(tmp_path, [crashed("c", 0, tmp_path / "runs" / "c-0")], [scenario("c")])
    culprit = re.search(r'<details class="thread culprit" open><summary>Thread 10 &quot;python&quot;, got SIGSEGV'
                        r'.*?</details>', page, re.S)
    assert culprit is not None, "the crashed thread is open"
    frames = culprit.group(0)
    # The culprit frame: the innermost in code someone wrote (not libc, not the interpreter).
    assert '<li class="frame native culprit"><span class="kind">C</span>0x2 free_pool at pool.cpp:40  [ext.so]</li>' \
        in frames
    assert '<li class="frame py"><span class="kind">py</span>body  (/work/case.py:7)</li>' in frames
    assert '<li class="frame py harness"><span class="kind">py</span>main  (/x/lifeguard/child/bootstrap.py:167)' \
        in frames
    assert '<li class="frame native harness"><span class="kind">C</span>0x4 __libc_start_main' in frames
    assert '<details class="thread"><summary>Thread 11' in page  # the other thread: closed
    assert page.index("Thread 10") < page.index("Thread 11")  # the culprit first
    # The evidence files, relative: the named one and what else the run folder holds (the core).
    assert '<a href="runs/c-0/stderr.txt">stderr.txt</a>' in page and '<a href="runs/c-0/core.10">core.10</a>' in page


def test_harness_lines_of_a_dump_and_a_traceback() -> None:
    marks = [hidden for _, hidden in harness_lines(DUMP)]
    lines = DUMP.rstrip().splitlines()
    assert [line for line, hidden in zip(lines, marks, strict=True) if not hidden] == lines[:5]  # the program's
    traceback = ('Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
                 '  File "/c/lifeguard/child/bootstrap.py", line 167, in main\n    run(spec)\n'
                 '  File "/work/case.py", line 15, in body\n    raise ValueError("x")\nValueError: x\n')
    shown = [line for line, hidden in harness_lines(traceback) if not hidden]
    assert shown == ["Traceback (most recent call last):", '  File "/work/case.py", line 15, in body',
                     '    raise ValueError("x")', "ValueError: x"]


def test_links_are_relative_inside_the_folder_and_absolute_outside(tmp_path: Path) -> None:
    assert href(str(tmp_path / "runs" / "a b" / "core.1"), tmp_path) == "runs/a%20b/core.1"
    assert href("/elsewhere/x.txt", tmp_path) == "file:///elsewhere/x.txt"


def test_charts_are_drawn_with_nothing_installed_for_repeated_series(tmp_path: Path) -> None:
    """A series of five runs gets its rate, run-time and outcome charts as inline SVG (no renderer, no
    script); the outcome strip's axis numbers the five runs 1 to 5, no more."""
    results = [passed("rep", 0), passed("rep", 1), crashed("rep", 2, tmp_path / "runs" / "r2"), passed("rep", 3),
               passed("rep", 4)]
    page, _ = page_of(tmp_path, results, [scenario("rep")])
    assert page.count("<svg") == 3 and "Charts need" not in page
    strip = re.search(r'<div class="chart along">(.*?)</svg>', page, re.S)
    assert strip is not None
    numbers = [int(n) for n in re.findall(r'text-anchor="middle"[^>]*>(\d+)</text>', strip.group(1))]
    assert numbers == [1, 2, 3, 4, 5], numbers
    assert strip.group(1).count("<rect x=") == 5 + 2  # a bar a run, and the legend's two outcomes
    assert "first failure: run 3" in strip.group(1)
    assert "rate" in page and "1/5" in page  # the series' statistics: it ran more than once


def test_a_failing_series_shows_its_finding_and_culprit_in_the_verdict_table(tmp_path: Path) -> None:
    page, _ = page_of(tmp_path, [crashed("tests/test_mod.py::test_fork_with_pending_callback[buggy]", 0,
                                         tmp_path / "runs" / "c")], [scenario(
                                             "tests/test_mod.py::test_fork_with_pending_callback[buggy]")])
    table = page[page.index('<table id="series-table">'):page.index("</table>")]
    assert '<div class="finding-line"' in table and "[crash] crashed:" in table
    assert '<div class="culprit-line"' in table and "free_pool" in table and "pool.cpp:40" in table
    # The name breaks only after its separators, never inside a word.
    assert ("tests/<wbr>test_<wbr>mod.<wbr>py::<wbr>test_<wbr>fork_<wbr>with_<wbr>pending_<wbr>callback[<wbr>"
            "buggy]<wbr>") in table
    # One run: no statistics, no charts.
    assert "<svg" not in page and "rate &gt;" not in page and "rate >" not in page
    assert "failure rate (95% interval)" not in table


def test_a_pytest_session_of_300_tests_keeps_its_summary_usable(tmp_path: Path) -> None:
    """One series a test, named by its node id, one run each: the failures on top, the expected series
    folded, the charts bounded, every test in the table."""
    names = [f"tests/test_mod{n % 7}.py::test_case[{n}]" for n in range(300)]
    failing = {names[17], names[250]}
    results = [crashed(name, 0, tmp_path / "runs" / f"t{n}") if name in failing else passed(name, 0)
               for n, name in enumerate(names)]
    page, _ = page_of(tmp_path, results, [scenario(name) for name in names])
    order = re.findall(r'<tr class="series (\w+)" data-name="([^"]*)">', page)
    assert len(order) == 300 and {name for _, name in order[:2]} == failing  # a node id, named by itself
    assert '<input type="checkbox" id="show-expected"> show the 298 expected series' in page  # folded
    assert "<svg" not in page and "rate &gt;" not in page  # one run a test: no statistics, no charts
    assert len(table_of(page)["rows"]) == 300  # type: ignore[arg-type]


def test_a_runs_own_process_is_named_by_its_series_not_by_the_bootstrap(tmp_path: Path) -> None:
    from dataclasses import replace

    result = crashed("boom", 0, tmp_path / "runs" / "b")
    bootstrap = ("/usr/bin/python3", "-X", "faulthandler", "-u", "-c",
                 "import sys; sys.path.insert(0, '/c/childpath'); from lifeguard.child import bootstrap; "
                 "bootstrap.main()")
    result = replace(result, backtraces=(replace(result.backtraces[0], cmdline=bootstrap),))
    page, _ = page_of(tmp_path, [result], [scenario("boom")])
    assert "Process 10: boom[default] (lifeguard&#x27;s child of the run)" in page
    assert "sys.path.insert" not in page.split('id="lg-runs"')[0]
