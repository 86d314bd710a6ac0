"""The fixture builder: real compiler, per-variant defines, cache reuse, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_report, run_cli

TINY_C = r'''
#include <Python.h>
static PyObject *which(PyObject *self, PyObject *args) {
    return PyUnicode_FromString(LIFEGUARD_FIXED ? "fixed" : "buggy");
}
static PyMethodDef methods[] = {{"which", which, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "tiny", NULL, -1, methods};
PyMODINIT_FUNC PyInit_tiny(void) { return PyModule_Create(&def); }
'''

SCENARIO = '''
import lifeguard
from lifeguard import child

@lifeguard.scenario(fixture="tiny", expect={"buggy": "passed", "fixed": "passed"}, timeout=20)
def knows_its_variant(fx):
    assert fx.which() == child.variant(), (fx.which(), child.variant())
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fixtures_native" / "tiny").mkdir(parents=True)
    (tmp_path / "fixtures_native" / "tiny" / "tiny.c").write_text(TINY_C)
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "tiny_scenarios.py").write_text(SCENARIO)
    return tmp_path


def _env(tmp_path: Path) -> dict[str, str]:
    return {"LIFEGUARD_CACHE": str(tmp_path / "cache")}


def test_variants_are_built_and_run(project: Path) -> None:
    proc = run_cli("run", str(project / "scenarios"), "--report", str(project / "r"), env=_env(project))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = load_report(project / "r")["runs"]
    assert sorted((r["variant"], r["outcome"]) for r in runs) == [("buggy", "passed"), ("fixed", "passed")]
    # The compiler's seconds are said while they pass, before the header; a cached build says nothing.
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["compiling fixture tiny (buggy)...", "compiling fixture tiny (fixed)..."], proc.stdout
    again = run_cli("run", str(project / "scenarios"), env=_env(project))
    assert again.returncode == 0 and "compiling" not in again.stdout, again.stdout
    quiet = run_cli("build", "--force", str(project / "scenarios"), env=_env(project))
    assert quiet.stdout.count("compiling fixture tiny") == 2, quiet.stdout


def test_cache_reuse_force_and_source_change(project: Path) -> None:
    env = _env(project)
    first = run_cli("build", str(project / "scenarios"), env=env)
    assert first.returncode == 0 and first.stdout.count(" built: ") == 2, first.stdout + first.stderr
    again = run_cli("build", str(project / "scenarios"), env=env)
    assert again.stdout.count(" cached: ") == 2
    forced = run_cli("build", str(project / "scenarios"), "--force", env=env)
    assert forced.stdout.count(" built: ") == 2
    source = project / "fixtures_native" / "tiny" / "tiny.c"
    source.write_text(source.read_text() + "\n/* changed */\n")
    changed = run_cli("build", str(project / "scenarios"), "--variant", "fixed", env=env)
    assert changed.stdout.count(" built: ") == 1 and "tiny[fixed]" in changed.stdout


def test_compiler_error_is_shown_verbatim(project: Path) -> None:
    source = project / "fixtures_native" / "tiny" / "tiny.c"
    source.write_text(source.read_text() + "\nint broken = undeclared_identifier_here;\n")
    proc = run_cli("run", str(project / "scenarios"), env=_env(project))
    assert proc.returncode == 2
    assert "undeclared_identifier_here" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_compiler_is_a_clear_error(project: Path) -> None:
    proc = run_cli("build", str(project / "scenarios"), env={**_env(project), "CC": "no-such-cc-compiler"})
    assert proc.returncode == 2
    assert "compiler not found: no-such-cc-compiler" in proc.stderr
    assert "apt-get install" in proc.stderr


def test_unknown_fixture(project: Path) -> None:
    (project / "scenarios" / "tiny_scenarios.py").write_text(SCENARIO.replace('fixture="tiny"', 'fixture="nope"'))
    proc = run_cli("run", str(project / "scenarios"), env=_env(project))
    assert proc.returncode == 2 and "unknown fixture 'nope'" in proc.stderr


def test_concurrent_builds_share_one_result(project: Path) -> None:
    """Many processes building the same fixture at once (parallel runs, xdist workers)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **_env(project))
    code = ("import sys; from pathlib import Path; from lifeguard.build import build_fixture; "
            "from lifeguard.interpreter import resolve; "
            f"b = build_fixture('tiny', 'fixed', resolve(), near=Path({str(project / 'scenarios')!r})); "
            "print(b.module_path)")

    def build_once(_: int) -> str:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    with ThreadPoolExecutor(4) as pool:
        paths = set(pool.map(build_once, range(4)))
    assert len(paths) == 1
    assert Path(paths.pop()).exists()
