"""Where cores land: the kernel's core_pattern read and judged, and the cores a run left found."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeguard.capture import cores
from lifeguard.run.launch import core_files


def test_core_pattern_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel setting itself cannot be changed here: a file stands in for /proc/sys/kernel/core_pattern."""
    fake = tmp_path / "core_pattern"
    monkeypatch.setattr(cores, "CORE_PATTERN", fake)
    fake.write_text("|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h\n")
    setup = cores.core_setup()
    assert not setup.usable and "systemd-coredump" in setup.note and "--backtrace replay" in setup.note
    fake.write_text("/var/crash/core.%e.%p\n")
    assert not cores.core_setup().usable
    fake.write_text("core\n")
    assert cores.core_setup().usable


def test_an_unreadable_core_pattern_is_not_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "CORE_PATTERN", tmp_path / "missing")
    setup = cores.core_setup()
    assert not setup.usable and "core_pattern" in setup.note


def test_core_files_in_a_run_folder(tmp_path: Path) -> None:
    for name in ("core", "core.1234", "core.python3.99", "stderr.txt", "events.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "core.d").mkdir()  # a folder is never a core
    assert [p.name for p in core_files(tmp_path)] == ["core", "core.1234", "core.python3.99"]
