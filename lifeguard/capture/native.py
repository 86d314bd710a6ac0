"""Native evidence for failed runs: gdb on hung processes and on crash cores.

The supervisor calls these only for runs that failed, so passing runs pay nothing.
Without gdb, lifeguard still runs and keeps the faulthandler evidence.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lifeguard.build import cache_dir
from lifeguard.capture.faulthandler import merge_faulthandler
from lifeguard.capture.gdb import analyse_core, capture_live, gdb_available, replay_crash
from lifeguard.child import protocol
from lifeguard.model.run import RunSpec
from lifeguard.model.stacks import ProcessStacks
from lifeguard.run.launch import child_argv, child_env, child_spec
from lifeguard.run.supervise import CaptureHook, HangContext

HANG_CAPTURE_TIMEOUT = 20.0
CORE_ANALYSIS_TIMEOUT = 60.0


def gdb_missing_note() -> str | None:
    if gdb_available() is None:
        return "gdb not found: native stacks are not captured (apt-get install gdb); faulthandler evidence only"
    return None


def _merge_python(process: ProcessStacks, python_stacks: dict[str, str]) -> ProcessStacks:
    """Attach faulthandler Python frames where python-gdb gave none."""
    dump = python_stacks.get(str(process.pid))
    if not dump or any(t.python_frames for t in process.threads):
        return process
    return merge_faulthandler(process, dump)


def gdb_hang_hook(context: HangContext) -> list[ProcessStacks]:
    """Native backtraces of every live process of a hung run's tree."""
    return capture_live(context.pids, timeout=HANG_CAPTURE_TIMEOUT, cache_dir=cache_dir() / "gdb-index")


def merge_python_stacks(backtraces: list[ProcessStacks], python_stacks: dict[str, str]) -> list[ProcessStacks]:
    """Give native stacks without Python frames (no python-gdb) the faulthandler ones."""
    return [_merge_python(process, python_stacks) for process in backtraces]


# The back ends that capture a hung tree's native stacks, each with its availability check. A new
# back end (pystack, py-spy...) is a module with a CaptureHook and one line here.
HANG_BACKENDS: tuple[tuple[Callable[[], object], CaptureHook], ...] = (
    (gdb_available, gdb_hang_hook),
)


def native_capture_hooks() -> tuple[CaptureHook, ...]:
    """The hang capture hooks available here; empty when no back end is (gdb missing)."""
    return tuple(hook for available, hook in HANG_BACKENDS if available())


def analyse_crash_cores(cores: list[Path], executable: str, *,
                        keep: bool = False) -> tuple[list[ProcessStacks], list[str]]:
    """Backtraces from the core files a crashed run left (cores.find_cores), and notes on what could
    not be read; the cores are deleted unless ``keep``."""
    if not cores:
        return [], []
    if gdb_available() is None:
        if not keep:
            for core in cores:
                os.unlink(core)
        return [], ["a core file was written but gdb is missing to read it (apt-get install gdb)"]
    processes = []
    for core in cores:
        processes.append(analyse_core(core, executable, timeout=CORE_ANALYSIS_TIMEOUT,
                                      cache_dir=cache_dir() / "gdb-index"))
        if not keep:
            os.unlink(core)
    return processes, []


REPLAY_TIMEOUT_MARGIN = 30.0


def replay_under_gdb(spec: RunSpec) -> tuple[list[ProcessStacks], list[str]]:
    """Rerun a crashed run under gdb (in ``<run>/replay/``) and capture it where it stops; notes on
    what could not be done."""
    if gdb_available() is None:
        return [], ["a replay under gdb needs gdb (apt-get install gdb)"]
    folder = spec.run_dir / "replay"
    folder.mkdir(parents=True, exist_ok=True)
    replayed = replace(spec, run_dir=folder, cores=False)
    env = dict(os.environ)
    env.update(child_env(replayed, uuid.uuid4().hex, events_path=folder / protocol.EVENTS_FILE))
    env[protocol.SPEC_ENV] = repr(child_spec(replayed))
    # gdb's "run" passes arguments through a shell: the bootstrap as a script file needs no quoting.
    process = replay_crash(child_argv(replayed, as_script=True), env=env, cwd=folder,
                           stdout_path=folder / protocol.STDOUT_FILE, stderr_path=folder / protocol.STDERR_FILE,
                           timeout=spec.timeout + REPLAY_TIMEOUT_MARGIN,
                           cache_dir=cache_dir() / "gdb-index")
    return [process], []
