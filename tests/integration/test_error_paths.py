"""Errors that must neither lose runs nor lie, on real sessions: a reader that leaves (``| head -1``), an
unwritable build cache or report folder, a run that deletes its own folder, lifeguard's own bug in one run,
a timeout of nan, a full disk, hostile text in a child's output, colliding scenario names, an async body.

Each ends with the exit code DESIGN.md promises and, where a session ran, every report written and whole.
The full-disk and read-only cases mount a small tmpfs (root only); where mounting is impossible they skip,
saying why.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifeguard.interpreter import resolve
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.plan.discover import discover
from lifeguard.plan.scheduler import PlanOptions
from lifeguard.report.sinks import sinks_for
from lifeguard.report.terminal import TerminalSink
from lifeguard.run.engine import Engine
from lifeguard.session.setup import exit_code
from tests.helpers import CLI_TIMEOUT, ROOT, Pace, load_report, real_python, run_cli

MOUNT_TIMEOUT = 30.0


def lifeguard_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("lifeguard:")]


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *parts: str) -> str:
    """Exit 2 with one line of lifeguard's own, no traceback, holding every one of ``parts``."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = lifeguard_errors(proc.stderr)
    for part in parts:
        assert part in line, line
    return line


def assert_reports_whole(report: Path, runs: int) -> dict[str, Any]:
    """results.jsonl one whole line per run, report.json and junit.xml parsing; report.json returned."""
    lines = (report / "results.jsonl").read_bytes().decode("utf-8").splitlines()
    assert len(lines) == runs, lines
    for line in lines:
        json.loads(line)
    ET.parse(report / "junit.xml")
    data = load_report(report)
    assert len(data["runs"]) == runs
    return data


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a tmpfs with the given options on a fresh folder; unmounted at the end. Skips where this
    process may not mount (not root, or no CAP_SYS_ADMIN in a container)."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        folder = tmp_path / f"mnt{len(mounted)}"
        folder.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                              text=True, timeout=MOUNT_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {proc.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", str(folder)], check=True, timeout=MOUNT_TIMEOUT, stdin=subprocess.DEVNULL)


def test_a_reader_that_goes_away_stops_the_printing_not_the_session(tmp_path: Path, pace: Pace) -> None:
    """`lifeguard run ... | head -1` where every run fails: the session completes, every report is
    written, and the exit code is the verdict's (1), not 0."""
    go = tmp_path / "go"
    path = tmp_path / "fails.py"
    path.write_text(f'''
import os, time
import lifeguard

@lifeguard.scenario(repeat=3, timeout={pace.deadline_text(60)})
def always_fails():
    deadline = time.monotonic() + {pace.deadline(60)}
    while not os.path.exists({str(go)!r}):  # the test has closed its end of lifeguard's stdout
        if time.monotonic() > deadline:
            raise SystemExit("no go from the test")
        time.sleep(0.01)
    raise SystemExit(3)
''')
    report = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen([real_python(), "-m", "lifeguard", "run", "-j", "2", "--no-native", "--report",
                                 str(report), str(path)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith(b"lifeguard ")  # the header: what `head -1` keeps
            proc.stdout.close()  # and goes away
            go.touch()
            rc = proc.wait(timeout=CLI_TIMEOUT)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(5)
    errors = (tmp_path / "stderr.txt").read_text()
    assert rc == 1, errors
    assert "Traceback" not in errors and "Exception ignored" not in errors, errors
    data = assert_reports_whole(report, 3)
    assert [r["outcome"] for r in data["runs"]] == ["failed"] * 3 and data["all_expected"] is False
    assert ET.parse(report / "junit.xml").getroot().get("failures") == "1"


def test_an_unwritable_build_cache_is_one_line_naming_it_and_the_remedy(tmp_path: Path,
                                                                       mount_tmpfs: Callable[[str], Path]) -> None:
    (tmp_path / "a_file").write_text("")
    blocked = tmp_path / "a_file" / "cache"  # a file on its path
    proc = run_cli("run", "--no-native", "-c", "pass", env={"LIFEGUARD_CACHE": str(blocked)})
    assert_one_line_error(proc, f"the build cache {blocked} ($LIFEGUARD_CACHE) cannot be written",
                          "set LIFEGUARD_CACHE to a folder you can write")
    # A fixture build needs the cache too (it fails there, before the compiler starts).
    proc = run_cli("build", "exit_with_pending_callback", env={"LIFEGUARD_CACHE": str(blocked)})
    assert_one_line_error(proc, str(blocked), "LIFEGUARD_CACHE")
    read_only = mount_tmpfs("size=64k,ro")
    proc = run_cli("run", "--no-native", "-c", "pass", env={"LIFEGUARD_CACHE": str(read_only)})
    assert_one_line_error(proc, f"the build cache {read_only}", "Read-only file system")


def test_a_run_that_deletes_its_own_folder_loses_no_run_and_no_worker(tmp_path: Path, pace: Pace) -> None:
    """With -j 2, runs that remove their own folder (failing, crashing, passing): every run is recorded;
    the one lifeguard could not finish (its evidence folder gone) is an `error` run, and the session says 3."""
    path = tmp_path / "deletes.py"
    path.write_text(f'''
import os, shutil
import lifeguard

@lifeguard.scenario(repeat=2, timeout={pace.deadline_text(20)})
def deletes_and_crashes():
    shutil.rmtree(os.getcwd())
    os.abort()

@lifeguard.scenario(repeat=2, timeout={pace.deadline_text(20)})
def deletes_and_fails():
    shutil.rmtree(os.getcwd())
    raise SystemExit(3)

@lifeguard.scenario(repeat=2, timeout={pace.deadline_text(20)})
def deletes_and_passes():
    shutil.rmtree(os.getcwd())
''')
    report = tmp_path / "r"
    proc = run_cli("run", "-j", "2", "--no-native", "--report", str(report), str(path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    data = assert_reports_whole(report, 6)
    outcomes = {(r["scenario"], r["index"]): r["outcome"] for r in data["runs"]}
    assert outcomes == {("deletes_and_crashes", 0): "error", ("deletes_and_crashes", 1): "error",
                        ("deletes_and_fails", 0): "failed", ("deletes_and_fails", 1): "failed",
                        ("deletes_and_passes", 0): "passed", ("deletes_and_passes", 1): "passed"}
    error = next(r for r in data["runs"] if r["outcome"] == "error")
    assert error["signal_name"] == "SIGABRT" and "lifeguard failed explaining a crashed" in error["reason"]
    assert "did the run delete it?" in error["reason"] and "Traceback" in error["notes"][-1]
    assert "=== lifeguard's own errors: 2 runs (exit code 3) ===" in proc.stdout
    junit = ET.parse(report / "junit.xml").getroot()
    assert junit.get("errors") == "1"
    [case] = [c for c in junit.iter("testcase") if c.find("error") is not None]
    assert case.get("name") == "deletes_and_crashes[default]"


def test_lifeguard_s_own_bug_in_one_run_is_an_error_run_and_the_others_go_on(tmp_path: Path, pace: Pace) -> None:
    """A diagnosis that raises on one run (a stand-in for a bug in a rule) on real runs, -j 2: that run is
    recorded as `error` in every sink, the other runs are recorded as they ended, and the code is 3."""
    path = tmp_path / "fails.py"
    path.write_text(f'''
import lifeguard

@lifeguard.scenario(repeat=4, timeout={pace.deadline_text(20)})
def fails():
    raise SystemExit(3)
''')

    def explain(spec: RunSpec, result: RunResult) -> RunResult:
        if spec.index == 1:
            raise RuntimeError("a bug in a rule")
        return result

    report = tmp_path / "r"
    out = io.StringIO()
    sinks = [TerminalSink(out, color="no"), *sinks_for(terminal=False, report_dir=report)]
    engine = Engine(resolve(None), jobs=2, sinks=sinks, explain=explain, runs_dir=report / "runs")
    session = engine.run(discover([str(path)]), PlanOptions())
    assert sorted((r.index, r.outcome) for r in session.results) == [
        (0, Outcome.FAILED), (1, Outcome.ERROR), (2, Outcome.FAILED), (3, Outcome.FAILED)]
    assert exit_code(session) == 3
    data = assert_reports_whole(report, 4)
    [error] = [r for r in data["runs"] if r["outcome"] == "error"]
    assert error["exit_code"] == 3 and "RuntimeError: a bug in a rule" in error["reason"]
    assert "fails[default]#1: error in" in out.getvalue()
    assert "lifeguard failed explaining a failed@exit run: RuntimeError: a bug in a rule" in out.getvalue()


@pytest.mark.parametrize("where", ["command line", "scenario"])
def test_a_timeout_of_nan_is_refused_naming_its_source(scenario_file: Callable[..., Path], where: str) -> None:
    if where == "command line":
        proc = run_cli("run", "--timeout", "nan", "-c", "pass")
        assert_one_line_error(proc, "argument --timeout: 'nan' must be a positive number of seconds")
    else:
        path = scenario_file("import lifeguard\n\n@lifeguard.scenario(timeout=float('nan'))\ndef body():\n    pass\n")
        proc = run_cli("run", str(path))
        assert_one_line_error(proc, f"{path}:3: timeout: nan must be a positive number of seconds")


def test_a_full_disk_stops_the_session_with_every_line_whole(tmp_path: Path, pace: Pace,
                                                           mount_tmpfs: Callable[[str], Path]) -> None:
    """A report folder on a 512 KiB disk that failing runs' evidence fills: the session stops (exit 2, one
    line saying the disk is full and where), and results.jsonl holds whole lines only."""
    disk = mount_tmpfs("size=512k")
    path = tmp_path / "noisy.py"
    path.write_text(f'''
import sys
import lifeguard

@lifeguard.scenario(repeat=300, timeout={pace.deadline_text(20)})
def noisy_failure():
    sys.stderr.write(("x" * 99 + "\\n") * 200)  # 20 KB of evidence a run: the disk is full within 30 runs
    raise SystemExit(3)
''')
    report = disk / "r"
    proc = run_cli("run", "-j", "2", "--no-native", "--report", str(report), str(path))
    line = assert_one_line_error(proc, "no space left on the disk of", str(report))
    assert "free space on that disk or write the report to another one" in line
    data = (report / "results.jsonl").read_bytes()
    assert data.endswith(b"\n")
    lines = data.decode("utf-8").splitlines()
    assert 0 < len(lines) < 300  # it stopped
    for entry in lines:
        assert json.loads(entry)["scenario"] == "noisy_failure"
    assert not (report / "report.json.tmp").exists() and not (report / "junit.xml.tmp").exists()


HOSTILE = r'''
import os, sys
import lifeguard

TEXT = "nul\x00 esc\x1b[31mred\x1b[0m clear\x1b[2J vt\x0b fffe\ufffe surrogate " + os.fsdecode(b"\xff")

@lifeguard.scenario(timeout=TIMEOUT)
def hostile_text():
    sys.stdout.write(TEXT.encode("utf-8", "surrogateescape").decode("utf-8", "replace") + "\n")
    sys.stdout.flush()
    sys.stderr.buffer.write(b"raw \xff\xfe\x00 title \x1b]0;pwned\x07 end\n")
    sys.stderr.flush()
    raise RuntimeError(TEXT)
'''


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_hostile_text_leaves_every_report_well_formed(tmp_path: Path, pace: Pace) -> None:
    """NUL, ESC sequences, a lone surrogate, \\x0b and U+FFFE in a child's output and exception: junit.xml
    parses, report.json and results.jsonl are UTF-8 JSON without a lone surrogate, the terminal gets no raw
    escape, and the exit code is the verdict's (1), not a traceback's."""
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE.replace("TIMEOUT", pace.deadline_text(20)))
    report = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONIOENCODING": "utf-8"}  # a strict UTF-8 terminal: a lone surrogate printed raw would raise
    proc = subprocess.run([real_python(), "-m", "lifeguard", "run", "--no-native", "--color", "no", "--report",
                           str(report), str(path)], cwd=ROOT, env=env, capture_output=True, timeout=CLI_TIMEOUT,
                          stdin=subprocess.DEVNULL, check=False)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")  # strict: both are valid UTF-8
    assert proc.returncode == 1, out + err
    for stream in (proc.stdout, proc.stderr):
        assert b"\x1b" not in stream and b"\x00" not in stream and b"\x0b" not in stream
    assert "RuntimeError: nul\\x00 esc\\x1b[31mred\\x1b[0m clear\\x1b[2J vt\\x0b fffe" in out
    assert "surrogate \\xff" in out and "title \\x1b]0;pwned\\x07 end" in out

    suite = ET.parse(report / "junit.xml").getroot()
    failure = suite.find("testcase/failure")
    assert failure is not None and "surrogate \\xff" in (failure.text or "")
    assert "\\x1b[2J" in (failure.text or "") and "fffe\\ufffe" in (failure.text or "")
    for name in ("report.json", "results.jsonl", "report.html"):
        (report / name).read_bytes().decode("utf-8")  # strict UTF-8
    data = assert_reports_whole(report, 1)
    [line] = (report / "results.jsonl").read_text().splitlines()
    for loaded in (data, json.loads(line)):
        for text in _strings(loaded):
            text.encode("utf-8")  # no lone surrogate survived
    assert "RuntimeError: nul\x00 esc\x1b[31m" in data["runs"][0]["reason"]  # JSON keeps the data itself
    assert "surrogate \\xff" in data["runs"][0]["reason"]


def test_hostile_text_from_a_plain_target_is_shown_escaped_live(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text('import sys\nsys.stdout.buffer.write(b"live \\x1b[31m\\x00\\xff\\x0b end\\n")\n')
    proc = run_cli("run", "--no-native", str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "live \\x1b[31m\\x00\\xff\\x0b end" in proc.stdout and "\x1b" not in proc.stdout


def test_a_report_folder_that_cannot_be_written_is_one_line(tmp_path: Path,
                                                           mount_tmpfs: Callable[[str], Path]) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for target in (a_file, a_file / "sub"):
        assert_one_line_error(run_cli("run", "--report", str(target), "--no-native", "-c", "pass"),
                              f"--report {target}: not a folder")
    assert_one_line_error(run_cli("probe", "--report", str(a_file), "json"), f"--report {a_file}: not a folder")
    read_only = mount_tmpfs("size=64k,ro")
    for target in (read_only, read_only / "sub"):
        assert_one_line_error(run_cli("run", "--report", str(target), "--no-native", "-c", "pass"),
                              f"--report {target}: cannot write there (Read-only file system)")


def test_colliding_scenario_names_are_refused_naming_both(tmp_path: Path) -> None:
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "s.py").write_text("import lifeguard\n\n@lifeguard.scenario()\ndef same():\n    pass\n")
    first, second = tmp_path / "one" / "s.py", tmp_path / "two" / "s.py"
    assert_one_line_error(run_cli("run", str(first), str(second)), f"'same' ({first}:3)", f"'same' ({second}:3)",
                          "have the same name")
    cases = tmp_path / "cases.py"
    cases.write_text('import lifeguard\n\n@lifeguard.scenario(name="case 1")\ndef a():\n    pass\n\n'
                     '@lifeguard.scenario(name="case_1")\ndef b():\n    pass\n')
    assert_one_line_error(run_cli("list", str(cases)), f"'case 1' ({cases}:3)", f"'case_1' ({cases}:7)",
                          "share the folder name 'case_1'")
    # One definition selected twice (its file, then its name) is one scenario, not a collision.
    proc = run_cli("list", str(first), f"{first}::same")
    assert proc.returncode == 0 and proc.stdout.count("same ") == 1, proc.stdout + proc.stderr


def test_an_async_scenario_body_is_refused_at_its_definition(scenario_file: Callable[..., Path]) -> None:
    path = scenario_file("import lifeguard\n\n@lifeguard.scenario()\nasync def body():\n    raise SystemExit(3)\n")
    assert_one_line_error(run_cli("run", str(path)), f"{path}:3: scenario body body is an async def")


def test_a_program_appending_to_results_jsonl_leaves_it_whole(tmp_path: Path) -> None:
    """A run's program can reach the report folder: what it appends to results.jsonl (lines longer than
    lifeguard's) is written over or cut off, and every line left is one of lifeguard's runs."""
    report = tmp_path / "report"
    path = tmp_path / "appends.py"
    path.write_text(textwrap.dedent(f"""
        import lifeguard

        @lifeguard.scenario(repeat=5)
        def appends():
            with open({str(report / "results.jsonl")!r}, "a") as results:
                results.write("junk that is no run " * 400 + "\\n")
    """))
    proc = run_cli("run", "--no-native", "--report", str(report), str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_reports_whole(report, 5)
