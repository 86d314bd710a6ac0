"""The command line: selection, listing, reports, and one-line errors with exit 2 for bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import load_report, run_cli

TWO = '''
import lifeguard

@lifeguard.scenario(timeout=20, repeat=2)
def alpha_ok():
    """Alpha passes."""

@lifeguard.scenario(expect={"default": "failed"}, timeout=20)
def beta_fails():
    raise SystemExit(3)
'''


def _assert_usage_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("lifeguard: error:")]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(("source", "needle"), [
    ("import lifeguard\n\n@lifeguard.scenario(expect={'default': 'exploded'})\ndef f():\n    pass\n",
     "unknown outcome 'exploded'"),
    ("import lifeguard\n\n@lifeguard.scenario(expect={'default': 'crashed@later'})\ndef f():\n    pass\n",
     "unknown phase 'later'"),
    ("import lifeguard\n\n@lifeguard.scenario(timeout=-1)\ndef f():\n    pass\n",
     "timeout: -1 must be a positive number of seconds"),
    ("import lifeguard\n\n@lifeguard.scenario(repeat=0)\ndef f():\n    pass\n", "repeat: 0 must be at least 1"),
    ("import lifeguard\n\n@lifeguard.scenario(expect={'buggy': 'passed'})\ndef f():\n    pass\n",
     "need a fixture"),
    ("import lifeguard\n\n@lifeguard.scenario(expect={'default': {'>=x': 'passed'}})\ndef f():\n    pass\n",
     "bad Python version key"),
    ("import lifeguard\n\n@lifeguard.scenario()\ndef f(:\n    pass\n", "syntax error"),
    ("import lifeguard\nimport not_a_module_anywhere\n\n@lifeguard.scenario()\ndef f():\n    pass\n",
     "ModuleNotFoundError"),
])
def test_malformed_scenario_file(scenario_file, source: str, needle: str) -> None:
    path = scenario_file(source)
    proc = run_cli("run", str(path))
    _assert_usage_error(proc, needle, str(path) + ":")


def test_definition_error_names_the_line(scenario_file) -> None:
    path = scenario_file("import lifeguard\n\n\n@lifeguard.scenario(repeat='x')\ndef f():\n    pass\n")
    proc = run_cli("list", str(path))
    _assert_usage_error(proc, f"{path}:4")


@pytest.mark.parametrize(("args", "needle"), [
    (["run", "no_such_scenario_name"], "unknown scenario 'no_such_scenario_name'"),
    (["run", "missing/file.py"], "no such file"),
    (["run", "--repeat", "0", "-c", "pass"], "--repeat"),
    (["run", "--repeat", "lots", "-c", "pass"], "not a whole number"),
    (["run", "-j", "-1", "-c", "pass"], "-j"),
    (["run", "--timeout", "soon", "-c", "pass"], "--timeout"),
    (["run", "--python", "/no/such/python", "-c", "pass"], "/no/such/python"),
    (["run", "-c", "def (:"], "syntax error"),
    (["run", "--frobnicate"], "unrecognized arguments"),
    (["run", "-k", "alpha and", "-c", "pass"], "-k"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    _assert_usage_error(run_cli(*args), needle)


def test_list_and_keyword_selection(scenario_file) -> None:
    path = scenario_file(TWO)
    listed = run_cli("list", str(path))
    assert listed.returncode == 0, listed.stderr
    assert "alpha_ok" in listed.stdout and "beta_fails" in listed.stdout and "Alpha passes." in listed.stdout
    only = run_cli("list", str(path), "-k", "alpha and not beta")
    assert "alpha_ok" in only.stdout and "beta_fails" not in only.stdout
    named = run_cli("list", f"{path}::beta_fails")
    assert "beta_fails" in named.stdout and "alpha_ok" not in named.stdout


def test_reports_and_exit_codes(scenario_file, tmp_path: Path) -> None:
    path = scenario_file(TWO)
    report = tmp_path / "r"
    proc = run_cli("run", str(path), "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_report(report)
    assert data["schema_version"] == 1
    assert {(s["scenario"], s["verdict"]) for s in data["summaries"]} == {
        ("alpha_ok", "expected"), ("beta_fails", "expected")}
    for run in data["runs"]:
        for key in ("scenario", "variant", "outcome", "phase", "signal", "exit_code", "duration", "evidence",
                    "backtraces", "findings"):
            assert key in run
    lines = (report / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["scenario"] for line in lines)
    suite = ET.parse(report / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"
    # The same file judged against a wrong expectation: exit 1 and the evidence in JUnit. The edit changes the
    # file's size: CPython keeps a .pyc whose source has the same size and the same mtime second.
    path.write_text(TWO.replace('expect={"default": "failed"}', 'expect={"default": "passed"} '))
    proc = run_cli("run", str(path), "--report", str(report))
    assert proc.returncode == 1
    assert "beta_fails[default]" in proc.stdout and "exit code 3" in proc.stdout
    failure = ET.parse(report / "junit.xml").getroot().find("testcase[@name='beta_fails[default]']/failure")
    assert failure is not None and "exit code 3" in failure.text
    page = (report / "report.html").read_text()
    assert "lifeguard report: 1 unexpected of 2 series" in page
    unexpected = page.index('<tr class="series unexpected" data-name="beta_fails[default]">')
    assert unexpected < page.index('<tr class="series expected" data-name="alpha_ok[default]">')  # on top
    assert '<a href="#s1">beta_<wbr>fails[<wbr>default]<wbr></a>' in page
    assert '<details class="series-evidence unexpected" id="s1" open>' in page and "exit code 3" in page


def test_html_report_escapes_what_it_shows(scenario_file, tmp_path: Path) -> None:
    path = scenario_file('''
import lifeguard

@lifeguard.scenario(timeout=20)
def prints_markup():
    print("out <script>alert(2)</script> \\x1b[31mred \\x00 nul \\x0b vt")
    raise ValueError("<script>alert(1)</script> \\x1b]0;title\\x07 \\ufffe")
''')
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"))
    assert proc.returncode == 1
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")  # strict UTF-8
    # The page's own two scripts (the runs' data and the code that draws the table), none from the child.
    assert page.count("<script") == 2 and "<script>alert" not in page
    # What the child said, shown (its source, also on the page, holds the same text as escapes: look at the
    # reason and the output themselves).
    assert '<p class="reason">ValueError: &lt;script&gt;alert(1)&lt;/script&gt; \\x1b]0;title\\x07 \\ufffe</p>' in page
    assert ("<summary>stdout (tail)</summary><pre>out &lt;script&gt;alert(2)&lt;/script&gt; "
            "\\x1b[31mred \\x00 nul \\x0b vt") in page
    assert not any(c in page for c in "\x1b\x00\x0b\x07\ufffe")


def test_plain_script_and_code(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text("import sys\nprint('argv0', sys.argv[0])\n")
    proc = run_cli("run", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "user_script[default]  1 run: 1 passed" in proc.stdout
    bad = tmp_path / "bad_script.py"
    bad.write_text("import os\nos.abort()\n")
    proc = run_cli("run", str(bad))
    assert proc.returncode == EXIT_LIFETIME and "crashed" in proc.stdout
    proc = run_cli("run", "-c", "import sys; sys.exit(4)")
    # Run alone, a program that fails by its own exit code (nothing lifetime-related): lifeguard exits with it.
    assert proc.returncode == 4 and "exit code 4" in proc.stdout


def test_repeat_and_jobs(scenario_file, tmp_path: Path) -> None:
    path = scenario_file(TWO)
    proc = run_cli("run", f"{path}::alpha_ok", "--repeat", "6", "-j", "2", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = load_report(tmp_path / "r")["runs"]
    assert sorted(r["index"] for r in runs) == list(range(6))


def test_expect_makes_a_reproduction_pass(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    script.write_text("import os\nos.abort()\n")
    reproduced = run_cli("run", "--expect", "crashed@run", "--no-native", "-j", "auto", str(script))
    assert reproduced.returncode == 0, reproduced.stdout + reproduced.stderr
    assert "(expected crashed@run) -> expected" in reproduced.stdout
    other = run_cli("run", "--expect", "hung", "--no-native", str(script))
    assert other.returncode == 1, other.stdout + other.stderr
    assert "(expected hung) -> unexpected" in other.stdout


def test_expect_is_refused_where_scenarios_declare_their_own() -> None:
    proc = run_cli("run", "pool_outlives_interpreter", "--expect", "passed")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--expect applies to plain targets" in proc.stderr
    bad = run_cli("run", "--expect", "crashed@later", "-c", "pass")
    assert bad.returncode == 2 and "unknown phase 'later'" in bad.stderr
