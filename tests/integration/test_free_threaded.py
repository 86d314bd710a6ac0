"""On a free-threaded interpreter (--disable-gil), the marked set: the bundled fixtures keep the GIL off, and a
hang is described without a GIL. They need such an interpreter as the one running the tests; elsewhere they
skip, saying so. `scripts/py314-chroot.sh freethreaded` builds one (docs/development.md runs them on it)."""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_report, run_cli

pytestmark = [
    pytest.mark.freethreaded,
    pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"),
                       reason="needs a free-threaded interpreter (scripts/py314-chroot.sh freethreaded builds one)"),
]

GIL_CHECK = '''
import sys
import lifeguard

def gil_stays_off(fx):
    assert not sys._is_gil_enabled(), f"importing {fx.__name__} turned the GIL on"
'''
FIXTURES = ("fork_gil", "gc_channel", "static_destructor")
GIL_WORD = re.compile(r"\bGIL\b")


def test_the_bundled_fixtures_keep_the_gil_off(tmp_path: Path) -> None:
    source = GIL_CHECK + "".join(
        f'\n@lifeguard.scenario(fixture="{name}", expect={{"buggy": "passed", "fixed": "passed"}})\n'
        f"def {name}_import(fx):\n    gil_stays_off(fx)\n" for name in FIXTURES)
    path = tmp_path / "gil_check.py"
    path.write_text(source)
    proc = run_cli("run", str(path), "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = load_report(tmp_path / "r")["runs"]
    assert len(runs) == 2 * len(FIXTURES) and all(r["outcome"] == "passed" for r in runs)
    assert "RuntimeWarning" not in proc.stderr


def test_a_fork_deadlock_without_a_gil_is_described_without_one(tmp_path: Path) -> None:
    proc = run_cli("run", f"{ROOT / 'scenarios' / 'fork_gil.py'}::fork_with_pending_callback", "--variant", "buggy",
                   "--repeat", "1", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = load_report(tmp_path / "r")["runs"]
    assert (run["outcome"], run["phase"]) == ("hung", "run")
    [finding] = run["findings"]
    assert finding["kind"] == "fork-deadlock"
    for said in (finding["summary"].replace("PyGILState", ""), finding["hint"]):
        assert not GIL_WORD.search(said), said
    assert all(process.get("free_threaded") is True for process in run["backtraces"])
    backtraces = (Path(run["run_dir"]) / "backtraces.txt").read_text()
    assert "waiting to attach" in backtraces
    assert not re.search(r"\bGIL (held|waiting|released)\b", backtraces)
    assert not GIL_WORD.search(proc.stdout.replace("PyGILState", "")), proc.stdout
