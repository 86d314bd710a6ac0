"""Every input gets one line or a correct run: targets that are not regular files, file names that are not
UTF-8, more arguments than an environment string holds, numbers past any real use, nesting past any real -k.
Real CLI sessions, each bounded (a FIFO target once blocked lifeguard forever)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_report, run_cli

BOUND = 60.0  # seconds: a refusal is immediate; a hang is what these cases once were


def _refused(*args: str, said: str, cwd: Path | None = None) -> None:
    proc = run_cli(*args, timeout=BOUND, cwd=cwd)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("lifeguard:")]
    assert said in line and len(line) < 400, line


def test_a_target_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    _refused("run", "--no-native", str(fifo), said="not a regular file or a folder (a FIFO)")
    _refused("run", "--no-native", "/dev/zero", said="not a regular file or a folder (a character device)")


def test_file_names_that_are_not_utf8_run_and_report(tmp_path: Path) -> None:
    passing = os.fsdecode(b"pass\xff.py")
    failing = os.fsdecode(b"fail\xfe.py")
    (tmp_path / passing).write_text("print('ran')\n")
    (tmp_path / failing).write_text("import os\nos._exit(1)\n")
    ok = run_cli("run", "--no-native", passing, cwd=tmp_path, timeout=BOUND)
    assert ok.returncode == 0 and "ran" in ok.stdout, ok.stdout + ok.stderr
    report = tmp_path / "report"
    bad = run_cli("run", "--no-native", "--report", str(report), failing, cwd=tmp_path, timeout=BOUND)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stdout + bad.stderr
    [run] = load_report(report)["runs"]
    assert run["outcome"] == "failed" and Path(run["run_dir"]).is_dir()


def test_twenty_thousand_arguments_reach_a_plain_script(tmp_path: Path) -> None:
    script = tmp_path / "count.py"
    script.write_text("import sys\nprint('arguments:', len(sys.argv) - 1, sys.argv[-1])\n")
    words = [f"argument-{n}" for n in range(20_000)]  # about 260 KB: twice what one environment string holds
    proc = run_cli("run", "--no-native", str(script), *words, timeout=BOUND)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "arguments: 20000 argument-19999" in proc.stdout


@pytest.mark.parametrize(("args", "said"), [
    (("-j", "99999999999999999999"), "must be at most 4,096"),
    (("--repeat", "9" * 400), "must be at most 1,000,000,000"),
    (("--timeout", "1e300"), "must be at most 10,000,000 seconds"),
    (("--shard", "1/99999999999"), "N must be at most 10,000"),
    (("--expect", "passed@exit"), "a passed run has no phase"),
    (("-k", "(" * 5000 + "a" + ")" * 5000), "nested more than 100 deep"),
    (("-k", "not " * 5000 + "a"), "nested more than 100 deep"),
], ids=["jobs", "repeat", "timeout", "shard", "passed-at-exit", "k-parentheses", "k-nots"])
def test_values_past_any_real_use_are_one_line(args: tuple[str, ...], said: str) -> None:
    _refused("run", "--no-native", *args, "-c", "pass", said=said)


@pytest.mark.parametrize(("decorator", "said"), [
    ("timeout=10**400", "timeout: 1000000000000000000000000000000000000... must be at most 10,000,000 seconds"),
    ("repeat=10**20", "repeat: 100000000000000000000 must be at most 1,000,000,000"),
])
def test_decorator_values_past_any_real_use_are_one_line(tmp_path: Path, decorator: str, said: str) -> None:
    path = tmp_path / "big.py"
    path.write_text(f"import lifeguard\n\n\n@lifeguard.scenario({decorator})\ndef big():\n    pass\n")
    _refused("run", "--no-native", str(path), said=said)


@pytest.mark.parametrize("command", [["run", "--no-native", "-c", "pass"], ["list"]])
def test_a_current_folder_that_was_deleted_is_one_line(tmp_path: Path, command: list[str]) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    # PYTHONPATH without an empty entry: Python itself cannot start with the current folder on its path and gone.
    proc = run_cli(*command, timeout=BOUND, shell_setup=f"cd {gone} && rmdir {gone}", env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "lifeguard: error: the current folder no longer exists" in proc.stderr, proc.stderr
