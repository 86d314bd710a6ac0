"""What the integration tests share: the CLI in a bounded child, reports, process facts, and the pace of
this machine (the base of every deadline a test sets).

Nothing here starts a process at import; tests/unit/ imports none of it but ROOT.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The interpreter running the tests is free-threaded (--disable-gil): programs whose threads hold and wait for a
# GIL show nothing there.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
NEEDS_GIL = "its program's threads hold and wait for a GIL: a free-threaded interpreter has none"
CLI_TIMEOUT = 120.0
COMPILE_TIMEOUT = 120.0
# How a deadline is derived from the measured start-up: a run's own start-up (interpreter, bootstrap,
# pytest's assertion rewriter for a pytest body) is about one bare `import pytest` child; this many of
# them leave room for the machine to get several times slower than it was when measured.
STARTUP_MARGIN = 10
STARTUP_SAMPLES = 3
STARTUP_TIMEOUT = 60.0  # one measuring child; a start-up this slow fails the session, it does not hang it


def real_python() -> str:
    """The interpreter running the tests, as it was started: in a venv, the venv's link
    (the real binary behind it would lose the venv's packages). Never a shell shim:
    sys.executable is what the interpreter reports of itself."""
    return sys.executable


def pyenv_python(version: str) -> str | None:
    """An installed CPython of ``version`` (e.g. "3.10"), or None."""
    root = Path(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))) / "versions"
    if root.is_dir():
        for candidate in sorted(root.glob(f"{version}.*"), reverse=True):
            exe = candidate / "bin" / "python"
            if exe.exists():
                return str(exe)
    for name in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if os.path.exists(name):
            return name
    return None


def run_cli(*args: str, timeout: float = CLI_TIMEOUT, cwd: Path | None = None,
            env: dict[str, str] | None = None, shell_setup: str = "") -> subprocess.CompletedProcess[str]:
    """Run `python -m lifeguard ARGS` in a bounded child (its own session, killed whole on timeout);
    ``shell_setup``: shell commands run first, in the shell that then becomes lifeguard (`ulimit -c ...`)."""
    return finish_cli(start_cli(*args, cwd=cwd, env=env, shell_setup=shell_setup), timeout)


def restore_terminal_sigint() -> None:
    # A background job of a non-interactive shell (a CI step, `cmd &`) starts with SIGINT ignored,
    # and Python keeps an ignored SIGINT ignored: give the supervisor a terminal's Ctrl-C.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
              shell_setup: str = "", terminal_sigint: bool = False) -> subprocess.Popen[str]:
    """Start `python -m lifeguard ARGS` in its own session, for a test that needs its pid (to signal it);
    end it with finish_cli. ``terminal_sigint``: SIGINT as a terminal's Ctrl-C delivers it (not ignored)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    argv = [real_python(), "-m", "lifeguard", *args]
    if shell_setup:
        argv = ["sh", "-c", f"{shell_setup} && exec {shlex.join(argv)}"]
    return subprocess.Popen(argv, cwd=cwd or ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, stdin=subprocess.DEVNULL,
                            preexec_fn=restore_terminal_sigint if terminal_sigint else None)


def wait_for(condition: Callable[[], object], what: str, timeout: float) -> None:
    """Poll ``condition`` (a fact a test's child makes true: a file written, a process gone) until ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def finish_cli(proc: subprocess.Popen[str], timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Wait for a lifeguard started by start_cli, at most ``timeout`` seconds (then its session is killed)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(5)
        raise AssertionError(f"lifeguard {' '.join(map(str, proc.args))} did not finish in {timeout} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def read_terminal(master: int, wait: float) -> bytes | None:
    """What a pseudo-terminal's program wrote within ``wait`` seconds (b"" if nothing), None once its other end
    has closed (the program exited)."""
    import select

    ready, _, _ = select.select([master], [], [], wait)
    if not ready:
        return b""
    try:
        return os.read(master, 65536) or None
    except OSError:
        return None


def load_report(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "report.json").read_text())


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (a zombie's command line is empty: never one of them)."""
    marker = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def run_pids(run: dict[str, Any]) -> set[int]:
    """Every pid a run's child reported on its result channel (main and forked)."""
    from lifeguard.child.protocol import EVENTS_FILE
    from lifeguard.run.channel import read_events

    pids = {event.pid for event in read_events(Path(run["run_dir"]) / EVENTS_FILE)}
    pids.update(event["pid"] for event in run.get("events", []))
    return {pid for pid in pids if pid is not None}


@dataclass(frozen=True)
class Pace:
    """How long this machine takes to start a Python child, measured once per session.

    Every deadline a test gives a run that must get somewhere first (a hang that must be caught in its
    body, a session that must fit a few runs) is derived from it, so a loaded machine gets longer
    deadlines instead of failing tests; a hang still ends at its deadline, so nothing waits longer
    than it must on a quiet one.
    """

    startup: float  # seconds: the slowest of a few bare `python -c "import pytest"` children

    def deadline(self, at_least: float) -> float:
        """A deadline no run's start-up reaches: STARTUP_MARGIN start-ups, and never below ``at_least``."""
        return round(max(at_least, STARTUP_MARGIN * self.startup), 1)

    def deadline_text(self, at_least: float) -> str:
        """``deadline`` as a command-line or source-text value."""
        return f"{self.deadline(at_least):g}"


def measure_pace(python: str | None = None, samples: int = STARTUP_SAMPLES) -> Pace:
    """Time a few bare children of the test interpreter that import pytest and exit; keep the slowest."""
    slowest = 0.0
    for _ in range(samples):
        started = time.monotonic()
        subprocess.run([python or real_python(), "-c", "import pytest"], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, timeout=STARTUP_TIMEOUT)
        slowest = max(slowest, time.monotonic() - started)
    return Pace(startup=slowest)


def crash_with_core(folder: Path, program: str, python: str, timeout: float) -> tuple[int, Path]:
    """Run ``program`` (which must die of SIGSEGV) in ``folder`` and return its pid and core file; skips the
    test where this machine writes no core into the working directory (a piped core_pattern, a zero limit)."""
    import resource
    import signal

    import pytest

    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"core files do not land in the working directory here (core_pattern {pattern!r})")
    if resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        pytest.skip("the hard RLIMIT_CORE is 0: no core files")
    script = folder / "crash.py"
    script.write_text(program)
    process = subprocess.Popen([python, str(script)], cwd=folder, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert process.wait(timeout=timeout) == -signal.SIGSEGV
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=timeout)
    cores = [p for p in folder.iterdir() if p.name == "core" or p.name.startswith("core.")]
    if not cores:
        pytest.skip("the kernel wrote no core file here (container core dump policy)")
    return process.pid, cores[0]


def build_shared_library(folder: Path, name: str, source: str, *flags: str, compiler: str = "gcc") -> Path:
    """Compile ``source`` (written to ``folder/<name without lib>.c`` or ``.cpp``) into ``folder/name``, a shared
    library or extension module, bounded in time. ``flags`` replace the default ``-g -O1``; ``-lpthread`` is
    always linked."""
    stem = name.split(".")[0]
    stem = stem.removeprefix("lib")  # libpool.so is built from pool.c: what its frames name
    source_file = folder / (stem + (".cpp" if compiler == "g++" else ".c"))
    source_file.write_text(source)
    built = folder / name
    subprocess.run([compiler, "-shared", "-fPIC", *(flags or ("-g", "-O1")), "-o", str(built), str(source_file),
                    "-lpthread"], check=True, timeout=COMPILE_TIMEOUT, capture_output=True)
    return built


def memory_hierarchy() -> tuple[Path, tuple[str, ...]] | None:
    """A writable memory cgroup hierarchy: its mount and the limit files to write (v1, or v2 with memory)."""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for parts in mounts:
        fstype, options = parts[parts.index("-") + 1], parts[-1]
        if fstype == "cgroup" and "memory" in options.split(","):
            return Path(parts[4]), ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
    for parts in mounts:
        if parts[parts.index("-") + 1] == "cgroup2":
            mount = Path(parts[4])
            controllers = (mount / "cgroup.subtree_control")
            if controllers.exists() and "memory" in controllers.read_text().split():
                return mount, ("memory.max", "memory.swap.max")
    return None


@contextlib.contextmanager
def memory_limited_cgroup(limit: int, name: str) -> Iterator[Path | None]:
    """A new memory cgroup limited to ``limit`` bytes (swap too, so the kernel must kill), removed after; None
    without root or a memory hierarchy."""
    found = memory_hierarchy()
    if found is None or os.geteuid() != 0:
        yield None
        return
    mount, files = found
    folder = mount / f"{name}-{os.getpid()}"
    folder.mkdir()
    try:
        for file in files:
            if (folder / file).exists():
                (folder / file).write_text(str(limit))
        yield folder
    finally:
        for _ in range(500):  # its members are gone once lifeguard has exited; the kernel may take a moment
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.01)
