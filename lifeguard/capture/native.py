"""Native evidence for failed runs: fast readers on hung processes and on crash cores, gdb behind them.

The supervisor calls these only for runs that failed, so passing runs pay nothing.
A hung tree is read by the first back end of HANG_BACKENDS that is installed; a process
it cannot read goes to the next one. Without any, lifeguard still runs and keeps the
faulthandler evidence.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from lifeguard.build import cache_dir
from lifeguard.capture.core_notes import core_executable
from lifeguard.capture.demangle import demangled
from lifeguard.capture.eu_stack import INSTALL_HINT as EU_STACK_INSTALL
from lifeguard.capture.eu_stack import capture_eu_stack, eu_stack_available
from lifeguard.capture.faulthandler import merge_faulthandler
from lifeguard.capture.gdb import analyse_core, capture_live, gdb_available, replay_crash
from lifeguard.capture.pystack_backend import INSTALL_HINT as PYSTACK_INSTALL
from lifeguard.capture.pystack_backend import analyse_core_pystack, capture_pystack, pystack_available
from lifeguard.capture.symbols import resolve_core
from lifeguard.capture.threadstate import with_kernel_state
from lifeguard.child import protocol
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.model.stacks import Backend, ProcessStacks
from lifeguard.proc.procfs import ZOMBIE_STATES, process_state
from lifeguard.run.launch import child_argv, child_env, spec_env
from lifeguard.run.supervise import NATIVE_BUDGET, CaptureHook, HangContext

# Every back end tried on one process, together: the deadline of the whole ladder.
HANG_CAPTURE_TIMEOUT = 20.0
CORE_ANALYSIS_TIMEOUT = 60.0
PYSTACK_HANG_TIMEOUT = 8.0  # a read takes ~0.3 s, torch or not
EU_STACK_HANG_TIMEOUT = 5.0  # ~0.02-0.2 s
PYSTACK_CORE_TIMEOUT = 30.0
MIN_ATTEMPT = 1.0  # less time than this left: not worth starting the next back end
MAX_PARALLEL_CAPTURES = 8  # processes of a tree read at once
assert PYSTACK_HANG_TIMEOUT + EU_STACK_HANG_TIMEOUT + MIN_ATTEMPT < HANG_CAPTURE_TIMEOUT  # gdb keeps a chance
assert HANG_CAPTURE_TIMEOUT <= NATIVE_BUDGET  # one process's whole ladder fits in a run's capture budget

# Failures no other back end can get past: every one of them attaches with ptrace.
_FINAL_ERRORS = ("No such process", "has exited", "Operation not permitted")


@dataclass(frozen=True)
class HangBackend:
    """One way to read a live process's stacks, with what tells whether it is installed."""

    name: str
    available: Callable[[], str | None]  # its version, or None when it cannot run here
    capture: Callable[[int, float], ProcessStacks]  # (pid, timeout): failures come back as ``error``
    timeout: float  # its own bound for one process, within HANG_CAPTURE_TIMEOUT
    install: str  # what to do to get it


def _gdb_capture_one(pid: int, timeout: float) -> ProcessStacks:
    return capture_live([pid], timeout=timeout, cache_dir=cache_dir() / "gdb-index")[0]


# The back ends that capture a hung tree's stacks, in order of preference: pystack (native and Python
# frames, ~0.3 s a process even with torch loaded), eu-stack (native frames of any process, ~0.1 s),
# gdb (native, and Python frames through python-gdb; 6-19 s a process with torch loaded). A new back
# end is a module with a per-process capture function and one line here.
HANG_BACKENDS: tuple[HangBackend, ...] = (
    HangBackend("pystack", pystack_available, capture_pystack, PYSTACK_HANG_TIMEOUT, PYSTACK_INSTALL),
    HangBackend("eu-stack", eu_stack_available, capture_eu_stack, EU_STACK_HANG_TIMEOUT, EU_STACK_INSTALL),
    HangBackend("gdb", gdb_available, _gdb_capture_one, HANG_CAPTURE_TIMEOUT, "apt-get install gdb"),
)


def available_hang_backends() -> tuple[HangBackend, ...]:
    """The back ends installed here, in order of preference."""
    return tuple(backend for backend in HANG_BACKENDS if backend.available() is not None)


def gdb_missing_note() -> str | None:
    """What to install when no native capture tool is available at all (None when one is)."""
    if available_hang_backends():
        return None
    return ("no native capture tool found: native stacks are not captured (install one: "
            f"{PYSTACK_INSTALL}; {EU_STACK_INSTALL}; apt-get install gdb); faulthandler evidence only")


def _is_final(process: ProcessStacks) -> bool:
    if any(marker in (process.error or "") for marker in _FINAL_ERRORS):
        return True
    state = process_state(process.pid)
    return state is None or state in ZOMBIE_STATES


def _unnamed_code(process: ProcessStacks) -> bool:
    """An unnamed native frame: JIT-compiled code (which pystack leaves unnamed, at times placed in a
    neighbouring library), or a stripped library's (which gdb cannot name either, at the cost of its read)."""
    return any(not frame.is_python and frame.function in (None, "??")
               for thread in process.threads for frame in thread.frames)


def capture_process(pid: int, backends: tuple[HangBackend, ...],
                    budget: float = HANG_CAPTURE_TIMEOUT, thorough: bool = False) -> ProcessStacks:
    """One live process read by the first back end that can, all of them within ``budget`` seconds.

    A process that none can read comes back with every back end's reason in ``error``; one read
    after another failed says which failed, and why, in its notes. ``thorough``: a read that left native frames
    unnamed is read again by gdb (which names JIT-compiled code), whose read is kept if it succeeds.
    """
    started = time.monotonic()
    result = _first_read(pid, backends, budget)
    gdb = next((b for b in backends if b.name == "gdb"), None)
    remaining = budget - (time.monotonic() - started)
    if not thorough or not result.ok or gdb is None or remaining < MIN_ATTEMPT or \
            result.backend is Backend.GDB or not _unnamed_code(result):
        return result
    again = gdb.capture(pid, min(gdb.timeout, remaining))
    if not again.ok:
        return replace(result, notes=(*result.notes, f"gdb could not read it again to name its unnamed frames: "
                                                     f"{again.error}"))
    return replace(again, notes=(f"read by gdb: {result.backend.value} left native frames unnamed", *again.notes))


def _first_read(pid: int, backends: tuple[HangBackend, ...], budget: float) -> ProcessStacks:
    started = time.monotonic()
    failures: list[str] = []
    last: ProcessStacks | None = None
    for backend in backends:
        remaining = budget - (time.monotonic() - started)
        if remaining < MIN_ATTEMPT:
            failures.append(f"{backend.name}: not tried, the {budget:g}s capture deadline had passed")
            break
        result = backend.capture(pid, min(backend.timeout, remaining))
        if result.ok:
            if failures:
                result = replace(result, notes=(f"read by {backend.name} after: " + "; ".join(failures),
                                                *result.notes))
            return result
        failures.append(f"{backend.name}: {result.error}")
        last = result
        if _is_final(result):
            break
    if last is None:
        return ProcessStacks(pid=pid, error="; ".join(failures) or "no native capture back end is available")
    return replace(last, error="; ".join(failures), duration=round(time.monotonic() - started, 3))


def fallback_hang_hook(backends: tuple[HangBackend, ...]) -> CaptureHook:
    """The one hook that reads a hung tree: every process in parallel, each by the first back end of
    ``backends`` that can read it. One hook, not one per back end, so no process is read twice."""

    def one(context: HangContext, pid: int) -> ProcessStacks:
        budget = min(HANG_CAPTURE_TIMEOUT, context.deadline - time.monotonic())
        if context.cancel is not None and context.cancel.is_set():
            return ProcessStacks(pid=pid, error="not read: the session was stopped during the capture")
        if budget < MIN_ATTEMPT:
            return ProcessStacks(pid=pid, error="not read: the run's capture budget was spent on other processes")
        return capture_process(pid, backends, budget, context.thorough)

    def capture(context: HangContext) -> list[ProcessStacks]:
        pids = list(context.pids)
        if len(pids) <= 1:
            return [one(context, pid) for pid in pids]
        with ThreadPoolExecutor(max_workers=min(len(pids), MAX_PARALLEL_CAPTURES)) as pool:
            return list(pool.map(lambda pid: one(context, pid), pids))

    return capture


def _merge_python(process: ProcessStacks, python_stacks: dict[str, str]) -> ProcessStacks:
    """Attach faulthandler Python frames where the back end gave none."""
    dump = python_stacks.get(str(process.pid))
    if not dump or any(t.python_frames for t in process.threads):
        return process
    return merge_faulthandler(process, dump)


def merge_python_stacks(backtraces: list[ProcessStacks], python_stacks: dict[str, str]) -> list[ProcessStacks]:
    """Give native stacks without Python frames (eu-stack, gdb without python-gdb) the faulthandler ones."""
    return [_merge_python(process, python_stacks) for process in backtraces]


def native_capture_hooks() -> tuple[CaptureHook, ...]:
    """The hang capture hook: the tree's kernel thread state, then the stacks read by the first
    available back end (falling back per process); kernel state alone when no back end is available."""
    backends = available_hang_backends()
    return (with_kernel_state(fallback_hang_hook(backends) if backends else None),)


def _analyse_core(core: Path, executable: str) -> ProcessStacks:
    """One core: pystack first (0.1-0.3 s; gdb took 11.5 s on a core with torch mapped), gdb when
    pystack cannot read it (not a Python process, a damaged interpreter)."""
    failure = None
    if pystack_available() is not None:
        result = analyse_core_pystack(core, executable, timeout=PYSTACK_CORE_TIMEOUT)
        if result.ok:
            return result
        failure = result
    if gdb_available() is None:
        assert failure is not None
        return failure
    result = analyse_core(core, executable, timeout=CORE_ANALYSIS_TIMEOUT, cache_dir=cache_dir() / "gdb-index")
    if failure is not None:
        result = replace(result, notes=(f"read by gdb after pystack-core: {failure.error}", *result.notes))
    return result


def analyse_crash_cores(cores: list[Path], executable: str, *,
                        keep: bool = False) -> tuple[list[ProcessStacks], list[str]]:
    """Backtraces from the core files a crashed run left (run.launch.core_files), and notes on what could
    not be read; the cores are deleted unless ``keep``."""
    if not cores:
        return [], []
    if gdb_available() is None and pystack_available() is None:
        if not keep:
            for core in cores:
                os.unlink(core)
        return [], [f"a core file was written but nothing here reads it ({PYSTACK_INSTALL}, or apt-get install gdb)"]
    processes = []
    for core in cores:
        program = core_executable(core) or executable  # a command's cores are of whatever crashed
        processes.append(resolve_core(_analyse_core(core, program), core))
        if not keep:
            os.unlink(core)
    return demangled(processes), []


REPLAY_TIMEOUT_MARGIN = 30.0


def replay_under_gdb(spec: RunSpec) -> tuple[list[ProcessStacks], list[str]]:
    """Rerun a crashed run under gdb (in ``<run>/replay/``) and capture it where it stops; notes on
    what could not be done."""
    if gdb_available() is None:
        return [], ["a replay under gdb needs gdb (apt-get install gdb)"]
    if spec.kind is RunKind.COMMAND:
        return [], ["a command is not replayed under gdb (its crashing process may be any of its descendants)"]
    folder = spec.run_dir / "replay"
    folder.mkdir(parents=True, exist_ok=True)
    replayed = replace(spec, run_dir=folder, cores=False)
    env = dict(os.environ)
    env.update(child_env(replayed, uuid.uuid4().hex, events_path=folder / protocol.EVENTS_FILE))
    env[protocol.SPEC_ENV] = spec_env(replayed)
    # gdb's "run" passes arguments through a shell: the bootstrap as a script file needs no quoting.
    process = replay_crash(child_argv(replayed, as_script=True), env=env, cwd=replayed.cwd,
                           stdout_path=folder / protocol.STDOUT_FILE, stderr_path=folder / protocol.STDERR_FILE,
                           timeout=spec.timeout + REPLAY_TIMEOUT_MARGIN,
                           cache_dir=cache_dir() / "gdb-index")
    return [process], []
