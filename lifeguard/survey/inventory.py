"""The target interpreter's installed distributions and their extension modules, read in a bounded child.

The inventory script (lifeguard.child.survey_inventory, standard library only) runs in the interpreter the
probes will run in, which may be another Python than lifeguard's: only it knows its sys.path. It reads
metadata, never a package's code, but it is still a child that may be slow (a network file system, a huge
environment): it gets a deadline, its own session (killed whole at the deadline) and its output goes to a
file read up to a bound, so nothing it does can hang or flood lifeguard.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifeguard.capture.bounded import kill_group, start_tool
from lifeguard.child import survey_inventory
from lifeguard.errors import SurveyError
from lifeguard.interpreter import Interpreter

INVENTORY_TIMEOUT = 120.0  # an environment of thousands of distributions reads in seconds
OUTPUT_LIMIT = 64 * 1024 * 1024  # of the JSON answer; more is not an inventory
ERROR_TAIL = 2000  # characters of the script's stderr kept for the error
# Runs the script by path with '' (its own temporary folder) on sys.path, not the script's folder: the child
# package's modules must not shadow anything the target's metadata could name.
_RUN = "import runpy, sys; sys.argv[0] = {path!r}; runpy.run_path({path!r}, run_name='__main__')"


@dataclass(frozen=True)
class Inventory:
    """What the target interpreter has installed (only the names asked for, when some were)."""

    python: str
    distributions: tuple[dict[str, Any], ...]
    missing: tuple[str, ...]  # names asked for that are not installed
    hooks: tuple[dict[str, Any], ...]  # entry points of group lifeguard.hooks, from every distribution


def read_inventory(interpreter: Interpreter, names: list[str], timeout: float = INVENTORY_TIMEOUT) -> Inventory:
    """Run the inventory script in ``interpreter`` for ``names`` (every distribution when empty)."""
    script = survey_inventory.__file__
    with tempfile.TemporaryDirectory(prefix="lifeguard-inventory-") as folder:
        out_path, err_path = Path(folder, "out.json"), Path(folder, "err.txt")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = start_tool([interpreter.executable, "-c", _RUN.format(path=script), *names],
                              stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=folder)
            try:
                status: int | None = proc.wait(timeout)
            except BaseException as exc:  # the deadline, or Ctrl-C: the script goes too
                kill_group(proc.pid)  # while unreaped, its pid (the group's id) cannot be reused
                proc.wait()  # SIGKILLed: it goes at once
                if not isinstance(exc, subprocess.TimeoutExpired):
                    raise
                status = None
        error = err_path.read_bytes()[-ERROR_TAIL:].decode(errors="replace").strip()
        if status is None:
            raise SurveyError(f"the inventory of {interpreter.executable} did not finish within {timeout:g} s")
        if status != 0 or out_path.stat().st_size > OUTPUT_LIMIT:
            raise SurveyError(f"the inventory of {interpreter.executable} failed (exit status {status}): "
                              f"{error.splitlines()[-1] if error else 'no output'}")
        try:
            data = json.loads(out_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise SurveyError(f"the inventory of {interpreter.executable} gave no JSON: {exc}") from None
    return Inventory(python=str(data["python"]), distributions=tuple(data["distributions"]),
                     missing=tuple(data["missing"]), hooks=tuple(data["hooks"]))


def requirement_names(text: str, source: str) -> list[str]:
    """The distribution names of a requirements file (``name==1.2``, ``name[extra]>=1``; comments, options
    and blank lines skipped); a line that names no distribution is refused with its number."""
    import re

    names = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([<>=!~;@ ]|$)", line)
        if match is None:
            raise SurveyError(f"{source}:{number}: not a requirement: {raw.strip()!r}")
        names.append(match.group(1))
    return names
