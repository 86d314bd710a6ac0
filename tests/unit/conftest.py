"""tests/unit/ starts no process: every way to start one fails the test that tries, naming the move to make."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from typing import Any, NoReturn

import pytest

MOVE = "tests/unit/ starts no process (it must stay fast and machine-independent): move this test to tests/integration/"


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise AssertionError(MOVE)


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse)  # what multiprocessing's spawn calls
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, _refuse)
