"""Native (and Python) backtraces of live processes and core files, with gdb.

gdb runs in batch mode with nothing from the user's or the system's gdb setup
(``-nx``, auto-load off, debuginfod off: a hung child must not wait for the network),
and sources our own script (gdb_script.py) that prints each thread as JSON behind
markers (parsed by gdb_parse). Every gdb call has a deadline; on expiry its whole
process group is killed and the target gets SIGCONT, so no process of a run is ever
left stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lifeguard.capture.bounded import resume_stopped, run_bounded
from lifeguard.capture.gdb_parse import GdbRun, build_stacks
from lifeguard.capture.python_gdb import find_python_gdb, python_gdb_for_pid
from lifeguard.errors import GdbNotFoundError
from lifeguard.model.stacks import ProcessStacks
from lifeguard.proc.procfs import ZOMBIE_STATES, ProcessIdentity, process_identity, process_state

GDB_SCRIPT = Path(__file__).with_name("gdb_script.py")
DEFAULT_LIVE_TIMEOUT = 10.0
DEFAULT_CORE_TIMEOUT = 30.0
# Parallel gdb processes: each one is mostly symbol loading (CPU), so more than a
# few only queue up, while the supervisor needs every process of a tree captured.
MAX_PARALLEL_GDB = 8
VERSION_TIMEOUT = 10.0

def gdb_path() -> str | None:
    """The real gdb binary on PATH, symlinks resolved, or None."""
    found = shutil.which("gdb")
    return os.path.realpath(found) if found else None


@dataclasses.dataclass(frozen=True)
class _GdbProbe:
    version: str | None  # None: the binary does not run
    has_python: bool


@functools.cache
def _probe_gdb(binary: str) -> _GdbProbe:
    """Version of a gdb binary and whether it embeds Python (our capture script needs it)."""
    with_python = _run_probe([binary, "-nx", "-batch", "-ex", "python print('gdb-python', gdb.VERSION)"])
    match = re.search(r"^gdb-python (\S+)", with_python, re.M)
    if match:
        return _GdbProbe(match.group(1), True)
    first_line = _run_probe([binary, "-nx", "-batch", "--version"]).partition("\n")[0]
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)\S*\s*$", first_line)
    return _GdbProbe(match.group(1) if match else None, False)


def _run_probe(argv: list[str]) -> str:
    try:
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            env=gdb_environment(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout


def gdb_environment() -> dict[str, str]:
    """The environment gdb runs with.

    gdb embeds its own Python: PYTHONHOME / PYTHONPATH meant for the interpreter
    under test (another version, a venv) would break it, so none pass through.
    Messages gdb prints are matched in English.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    env["LC_ALL"] = "C"
    return env


def gdb_available() -> str | None:
    """gdb's version string ("13.1") when a usable gdb (one with Python) is on PATH, else None."""
    binary = gdb_path()
    if binary is None:
        return None
    probe = _probe_gdb(binary)
    return probe.version if probe.has_python else None


def require_gdb() -> str:
    """Path of a usable gdb, or GdbNotFoundError with what to install."""
    binary = gdb_path()
    if binary is None:
        raise GdbNotFoundError("gdb was not found on PATH.")
    probe = _probe_gdb(binary)
    if probe.version is None:
        raise GdbNotFoundError(f"{binary} does not run (gdb --version failed).")
    if not probe.has_python:
        raise GdbNotFoundError(f"{binary} (gdb {probe.version}) was built without Python support.")
    return binary


def _gdb_command(gdb: str, cache_dir: Path | None, call: str, exe: str | None = None) -> list[str]:
    settings = [
        "set auto-load off",
        # Thread handles (pthread_t, what faulthandler prints) need libthread_db.
        "set auto-load libthread-db on",
        "set debuginfod enabled off",
        "set pagination off",
        "set confirm off",
        "set width 0",
        "set print thread-events off",
        "set print inferior-events off",
    ]
    if cache_dir is not None:
        # Symbol indexes of libpython, libc, a fixture's .so: built once, reused by
        # every later capture (the main cost of a capture is reading DWARF).
        settings += [f"set index-cache directory {cache_dir}", "set index-cache enabled on"]
    command = [gdb, "-nx", "-batch", "-q"]
    for setting in settings:
        command += ["-iex", setting]
    command += ["-x", str(GDB_SCRIPT), "-ex", f"python {call}"]
    if exe is not None:
        command.append(exe)
    return command


def _run_gdb(command: Sequence[str], timeout: float, on_timeout: Callable[[], None] | None = None) -> GdbRun:
    """Run gdb in its own session with output to files; kill its group at the deadline."""
    return run_bounded(command, timeout, env=gdb_environment(), on_timeout=on_timeout)


def _usable_cache_dir(cache_dir: Path | None) -> Path | None:
    """The index cache folder, created; None (capture without a cache) when it cannot be."""
    if cache_dir is None:
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return cache_dir


def _python_gdb_argument(python_gdb: Path | None, python_frames: bool, found: Path | None) -> str | None:
    if not python_frames:
        return None
    chosen = python_gdb if python_gdb is not None else found
    return str(chosen) if chosen is not None else None


def _capture_one(
    pid: int,
    *,
    timeout: float = DEFAULT_LIVE_TIMEOUT,
    cache_dir: Path | None = None,
    python_gdb: Path | None = None,
    python_frames: bool = True,
) -> ProcessStacks:
    """Backtraces of every thread of one live process (see capture_live)."""
    gdb = require_gdb()
    info = process_identity(pid)
    state = process_state(pid)
    if state is None or state in ZOMBIE_STATES:
        # Nothing to attach to: say so plainly rather than with gdb's ptrace errors.
        reason = "No such process" if state is None else "the process has exited (a zombie not yet reaped)"
        return ProcessStacks(pid=pid, ppid=info.ppid, exe=info.exe, cmdline=info.cmdline, error=reason)
    found = python_gdb_for_pid(pid, info.exe) if python_frames and python_gdb is None else None
    script = _python_gdb_argument(python_gdb, python_frames, found)
    cache_dir = _usable_cache_dir(cache_dir)
    call = f"capture_live({int(pid)}, {script!r})"
    run = _run_gdb(_gdb_command(gdb, cache_dir, call), timeout, on_timeout=lambda: resume_stopped(pid))
    return build_stacks(pid, info, run, mode="live", timeout=timeout, thread_names_from_proc=True)


def capture_live(
    pids: Sequence[int],
    *,
    timeout: float = DEFAULT_LIVE_TIMEOUT,
    cache_dir: Path | None = None,
    python_gdb: Path | None = None,
    python_frames: bool = True,
) -> list[ProcessStacks]:
    """Backtraces of every thread of every given live process, in the order given.

    One gdb per process, all in parallel, each bounded by ``timeout`` seconds. A
    process that cannot be captured (gone, attach refused, gdb timed out) comes
    back with ``error`` set, never as an exception; only a missing gdb raises
    (GdbNotFoundError). Python frames come from the interpreter's python-gdb
    extension: ``python_gdb`` forces one, None finds each process's own (see
    find_python_gdb), ``python_frames=False`` skips them (faster; merge a
    faulthandler dump instead).
    """
    require_gdb()
    if not pids:
        return []

    def one(pid: int) -> ProcessStacks:
        return _capture_one(
            pid, timeout=timeout, cache_dir=cache_dir, python_gdb=python_gdb, python_frames=python_frames
        )

    if len(pids) == 1:
        return [one(pids[0])]
    with ThreadPoolExecutor(max_workers=min(len(pids), MAX_PARALLEL_GDB)) as pool:
        return list(pool.map(one, pids))


def analyse_core(
    core_path: Path,
    exe: str,
    *,
    timeout: float = DEFAULT_CORE_TIMEOUT,
    cache_dir: Path | None = None,
    python_gdb: Path | None = None,
    python_frames: bool = True,
) -> ProcessStacks:
    """Backtraces of every thread in a core file, and the signal that killed the process.

    ``exe`` is the program that dumped core (for a Python child, the interpreter
    binary). Python frames as in capture_live, found from ``exe``. Failures come
    back as ``error``; only a missing gdb raises.
    """
    gdb = require_gdb()
    core_path = Path(core_path)
    found = find_python_gdb(exe) if python_frames and python_gdb is None else None
    script = _python_gdb_argument(python_gdb, python_frames, found)
    cache_dir = _usable_cache_dir(cache_dir)
    call = f"capture_core({str(core_path.resolve())!r}, {script!r})"
    run = _run_gdb(_gdb_command(gdb, cache_dir, call, exe=exe), timeout)
    info = ProcessIdentity(ppid=None, exe=exe, cmdline=())
    return build_stacks(None, info, run, mode="core", timeout=timeout, thread_names_from_proc=False)


def replay_crash(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdout_path: Path,
    stderr_path: Path,
    timeout: float = DEFAULT_CORE_TIMEOUT,
    cache_dir: Path | None = None,
    python_frames: bool = True,
) -> ProcessStacks:
    """Run ``argv`` under gdb until it stops on a signal; backtraces of every thread then.

    The program runs with exactly ``env`` (set inside gdb: gdb's own environment
    must not carry the target's PYTHON* variables), in ``cwd``, its output to the
    given files. The faulthandler dump signal and SIGPIPE pass through silently.
    """
    gdb = require_gdb()
    exe = argv[0]
    found = find_python_gdb(exe) if python_frames else None
    script = _python_gdb_argument(None, python_frames, found)
    cache_dir = _usable_cache_dir(cache_dir)
    # "run ARGS" replaces the program's arguments, so they go there, with the redirections.
    run_arguments = " ".join(shlex.quote(a) for a in argv[1:])
    run_arguments += f" > {shlex.quote(str(stdout_path))} 2> {shlex.quote(str(stderr_path))} < /dev/null"
    call = f"capture_replay({script!r}, {run_arguments!r})"
    command = _gdb_command(gdb, cache_dir, call)
    setup = ["set startup-with-shell on", f"set cwd {cwd}", "set follow-fork-mode parent",
             "set detach-on-fork on", "handle SIGUSR2 nostop noprint pass", "handle SIGPIPE nostop noprint pass",
             "unset environment"]
    setup += [f"set environment {name}={value}" for name, value in env.items() if "\n" not in value]
    extra: list[str] = []
    for line in setup:
        extra += ["-iex", line]
    # -iex settings first, then the script and the call, then the program and its arguments.
    command = [command[0], *extra, *command[1:], exe]
    run = _run_gdb(command, timeout)
    info = ProcessIdentity(ppid=None, exe=exe, cmdline=tuple(argv))
    stacks = build_stacks(None, info, run, mode="replay", timeout=timeout, thread_names_from_proc=False)
    return stacks
