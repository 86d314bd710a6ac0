"""Native and Python stacks of a live process or a core file, with pystack.

Why pystack first: it reads the target's memory directly and symbolizes only the frames
on the stacks, so a process that has imported torch (hundreds of MB of shared objects,
where gdb spends 6-19 s loading symbols) takes about as long as a bare interpreter,
~0.3 s. It knows every CPython layout from 2.7 to 3.14 by itself, so the child's
version does not have to match the supervisor's (a 3.13 child under a 3.11
supervisor), and it reads the GIL's holder from the interpreter.

pystack is a Python package of the *supervisor's* interpreter: the reader runs there,
in a child process (pystack_script.py) bounded by a deadline, so a read that gets
stuck is killed instead of hanging the supervisor; the process it stopped is resumed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

from lifeguard.capture.bounded import ToolRun, resume_stopped, run_bounded
from lifeguard.capture.core_notes import crashed_thread
from lifeguard.capture.pystack_parse import build_core, build_live, parse_document
from lifeguard.model.stacks import Backend, ProcessStacks
from lifeguard.proc.procfs import gone_reason, process_identity

SCRIPT = Path(__file__).with_name("pystack_script.py")
# runpy runs the script without putting its folder (gdb.py, faulthandler.py...) on sys.path.
RUNNER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
DEFAULT_LIVE_TIMEOUT = 8.0  # ~0.3 s is normal; a read still going after this is stuck
DEFAULT_CORE_TIMEOUT = 30.0
PROBE_TIMEOUT = 15.0
INSTALL_HINT = "pip install pystack (Linux only)"


@functools.cache
def pystack_available() -> str | None:
    """pystack's version when the supervisor's interpreter can import it, else None.

    Only looks (no import, no process): it is asked on every session start. A pystack
    that is installed but broken fails its first capture, and the next back end takes over.
    """
    if not sys.platform.startswith("linux") or not sys.executable:
        return None
    try:
        if importlib.util.find_spec("pystack") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version("pystack")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _run_script(arguments: list[str], timeout: float, pid: int | None = None) -> ToolRun:
    argv = [sys.executable, "-c", RUNNER, str(SCRIPT), *arguments]
    # cwd "/": "-c" puts the working directory first on sys.path, and no module may come from there.
    on_timeout = (lambda: resume_stopped(pid)) if pid is not None else None
    return run_bounded(argv, timeout, cwd="/", on_timeout=on_timeout)


def probe_pystack(timeout: float = PROBE_TIMEOUT) -> tuple[str | None, str]:
    """Run the reader once for real (``lifeguard doctor``): (version, "") or (None, why it fails)."""
    if pystack_available() is None:
        return None, f"pystack is not installed for {sys.executable}"
    run = _run_script(["version"], timeout)
    document, error = parse_document(run, timeout)
    if document is None:
        return None, error or "no output"
    return str(document.get("pystack")), ""


def capture_pystack(pid: int, timeout: float = DEFAULT_LIVE_TIMEOUT) -> ProcessStacks:
    """Native and Python stacks of every thread of one live process; failures come back as ``error``."""
    info = process_identity(pid)
    reason = gone_reason(pid)
    if reason is not None:
        return ProcessStacks(pid=pid, ppid=info.ppid, exe=info.exe, cmdline=info.cmdline,
                             backend=Backend.PYSTACK, error=reason)
    if pystack_available() is None:
        return ProcessStacks(pid=pid, ppid=info.ppid, exe=info.exe, cmdline=info.cmdline, backend=Backend.PYSTACK,
                             error=f"pystack is not installed for {sys.executable} ({INSTALL_HINT})")
    run = _run_script(["live", str(pid)], timeout, pid=pid)
    return build_live(pid, info, run, timeout)


def analyse_core_pystack(core_path: Path, exe: str, timeout: float = DEFAULT_CORE_TIMEOUT) -> ProcessStacks:
    """Native and Python stacks of every thread in a core file, and the signal that killed it.

    ``exe`` is the program that dumped core (for a Python child, the interpreter binary).
    """
    executable = os.path.realpath(exe)
    if pystack_available() is None:
        return ProcessStacks(pid=0, exe=executable, backend=Backend.PYSTACK_CORE,
                             error=f"pystack is not installed for {sys.executable} ({INSTALL_HINT})")
    run = _run_script(["core", str(Path(core_path).resolve()), executable], timeout)
    return build_core(executable, run, timeout, crashed_thread(Path(core_path)))
