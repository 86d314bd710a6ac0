"""What tells lifeguard that a free-threaded interpreter ran without its GIL: the build (its SOABI), and
nothing that turned the GIL on (PYTHON_GIL=1, -X gil=1, a module without Py_mod_gil, which CPython says)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifeguard.diagnose.explain import gil_was_off
from lifeguard.diagnose.messages import cause_quote, scan_lines
from lifeguard.interpreter import Interpreter

FREE = Interpreter("/opt/python3.13t", (3, 13, 15), "/inc", ".cpython-313t-x86_64-linux-gnu.so",
                   "cpython-313t-x86_64-linux-gnu", "/lib", "libpython3.13t.so")
WITH_GIL = replace(FREE, ext_suffix=".cpython-313-x86_64-linux-gnu.so", soabi="cpython-313-x86_64-linux-gnu")
TURNED_ON = ("<frozen importlib._bootstrap>:488: RuntimeWarning: The global interpreter lock (GIL) has been enabled "
             "to load module 'leaky', which has not declared that it can run safely without the GIL. To override "
             "this behavior and keep the GIL disabled (at your own risk), run with PYTHON_GIL=0 or -Xgil=0.")


def spec(interpreter: Interpreter, env: dict[str, str] | None = None, flags: tuple[str, ...] = ()) -> Any:
    return SimpleNamespace(interpreter=interpreter, env=env or {}, python_flags=flags, run_dir=Path("/nowhere"))


def test_the_build_is_told_by_its_soabi() -> None:
    assert FREE.free_threaded and not WITH_GIL.free_threaded


@pytest.mark.parametrize(("interpreter", "env", "flags", "stderr", "off"), [
    (FREE, {}, (), ["ok"], True),
    (WITH_GIL, {}, (), ["ok"], False),
    (FREE, {"PYTHON_GIL": "1"}, (), ["ok"], False),
    (FREE, {"PYTHON_GIL": "0"}, (), ["ok"], True),
    (FREE, {}, ("-X", "gil=1"), ["ok"], False),
    (FREE, {}, (), ["ok", TURNED_ON], False),
])
def test_the_gil_was_off_unless_something_turned_it_on(monkeypatch: pytest.MonkeyPatch, interpreter: Interpreter,
                                                        env: dict[str, str], flags: tuple[str, ...],
                                                        stderr: list[str], off: bool) -> None:
    monkeypatch.delenv("PYTHON_GIL", raising=False)
    assert gil_was_off(spec(interpreter, env, flags), scan_lines(stderr)) is off


def test_the_gil_turned_on_is_never_taken_for_a_cause() -> None:
    assert cause_quote(scan_lines([TURNED_ON])) is None
    quote = cause_quote(scan_lines([TURNED_ON, "mypool: fatal: fork() called after the pool started"]))
    assert quote is not None and quote.line.text.startswith("mypool")
