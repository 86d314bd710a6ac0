"""Finding the interpreter's python-gdb extension, and a missing gdb: file system facts only, no gdb run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lifeguard.capture import capture_live, find_python_gdb, gdb_available
from lifeguard.errors import GdbNotFoundError


def test_missing_gdb_raises_with_help(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gdb_available() is None
    with pytest.raises(GdbNotFoundError) as raised:
        capture_live([os.getpid()])
    assert "install" in raised.value.HELP_TEXT.lower()


def test_find_python_gdb_beside_the_interpreter(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    exe = prefix / "bin" / "python3.99"
    exe.write_text("")
    (prefix / "bin" / "python").symlink_to("python3.99")
    assert find_python_gdb(prefix / "bin" / "python") is None
    (prefix / "lib" / "libpython3.98.so.1.0-gdb.py").write_text("")  # another Python's: never chosen
    assert find_python_gdb(prefix / "bin" / "python") is None
    (prefix / "lib" / "libpython3.99.so.1.0").write_text("")
    (prefix / "lib" / "libpython3.99.so.1.0-gdb.py").write_text("")
    assert find_python_gdb(prefix / "bin" / "python") == prefix / "lib" / "libpython3.99.so.1.0-gdb.py"
    (prefix / "bin" / "python3.99-gdb.py").write_text("")
    assert find_python_gdb(prefix / "bin" / "python") == prefix / "bin" / "python3.99-gdb.py"
