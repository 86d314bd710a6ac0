"""An exit handler that runs after a library's own atexit shutdown: a crash at exit explained by atexit's order.
A real program: a C library (compiled here) whose Python module registers its shutdown at import, and a user's
handler registered before that import, which uses the library at exit; the same handler registered after the
import runs first and passes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import load_report, run_cli

COMPILE_TIMEOUT = 120
LIBRARY = r"""
#include <stdlib.h>
static int *state;
void start(void) { state = malloc(sizeof *state); *state = 0; }
void shutdown(void) { free(state); state = NULL; }
void use(void) { *state += 1; }  /* after shutdown: NULL */
"""
MODULE = """
import atexit, ctypes, os

lib = ctypes.CDLL(os.environ["MYLIB_SO"])
lib.start()


def shutdown():
    lib.shutdown()


atexit.register(shutdown)  # the library's own shutdown, at import
"""
PROGRAM = """
import atexit, ctypes, os

lib = ctypes.CDLL(os.environ["MYLIB_SO"])


def flush():
    lib.use()


if {early}:
    atexit.register(flush)  # before the library is imported: runs after its shutdown
import mylib  # noqa: E402
if not {early}:
    atexit.register(flush)
"""


def run_of(tmp_path: Path, early: bool) -> tuple[dict[str, Any], str]:
    source = tmp_path / "mylib.c"
    source.write_text(LIBRARY)
    library = tmp_path / "libmylib.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-g", "-O0", "-o", str(library), str(source)],
                   check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    (tmp_path / "mylib.py").write_text(MODULE)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(early=early))
    proc = run_cli("run", "--report", str(tmp_path / "r"), str(script), cwd=tmp_path,
                   shell_setup=f"export MYLIB_SO={library}")
    return dict(load_report(tmp_path / "r")["runs"][0]), proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_handler_that_runs_after_its_librarys_shutdown(tmp_path: Path) -> None:
    run, terminal = run_of(tmp_path, early=True)
    assert (run["outcome"], run["phase"]) == ("crashed", "exit"), run["reason"]
    finding = run["findings"][0]
    assert finding["kind"] == "atexit-order", [f["summary"] for f in run["findings"]]
    assert "the exit handler flush (program.py:" in finding["summary"]
    assert "mylib.shutdown" in finding["summary"]
    assert "[atexit-order]" in terminal


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_handler_registered_after_the_import_passes(tmp_path: Path) -> None:
    run, _ = run_of(tmp_path, early=False)
    assert run["outcome"] == "passed", run["reason"]
