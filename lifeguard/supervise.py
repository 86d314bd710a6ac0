"""Supervise one run: the one subprocess recipe the CLI, the plugin and the tests share.

Every run gets a fresh child of the real interpreter binary, in its own session
and working directory, with output in size-capped files, a result channel and a
deadline. On expiry the escalation ladder runs: faulthandler dump of every Python
process of the tree -> native capture hooks -> SIGKILL of the whole tree,
orphans included. Every wait is bounded; the supervisor never hangs.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from lifeguard import CHILD_ENV
from lifeguard.cache import cache_dir
from lifeguard.child import EVENTS_ENV, VARIANT_ENV
from lifeguard.interpreter import Interpreter
from lifeguard.outcomes import Outcome, Phase
from lifeguard.proctree import (
    RUN_MARKER_ENV,
    kill_tree,
    leftovers_after_exit,
    read_proc,
    reap_orphans,
    run_tree,
    signal_caught,
)
from lifeguard.results import RunResult

# The signal the child's faulthandler listens on for a dump of every thread.
DUMP_SIGNAL = signal.SIGUSR2
# How long to wait for all faulthandler dumps of a tree after signalling it.
DUMP_TIMEOUT = 1.0
# How often the wait loop wakes to watch output size and cancellation.
POLL_INTERVAL = 0.25
# A grandchild may still be exiting when the main child is gone: grace before
# calling it a leftover.
LEFTOVER_GRACE = 0.2
DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024
TAIL_BYTES = 8 * 1024
FATAL_RE = re.compile(r"^Fatal Python error: (.*)$", re.MULTILINE)



class RunInterrupted(Exception):
    """The run was cancelled (Ctrl-C); its tree has been killed."""


@dataclass(frozen=True)
class RunSpec:
    """Everything the supervisor needs to start one run."""

    scenario: str
    variant: str
    index: int
    kind: str  # "function", "script" or "code"
    path: str
    function: str
    code: str | None
    interpreter: Interpreter
    timeout: float
    run_dir: Path
    expected: str
    fixture: str | None = None
    fixture_dir: str | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    python_flags: tuple[str, ...] = ()
    # Native evidence for this run: a crashing child dumps core and gdb reads it,
    # gdb captures a hang (off after a series' first few failures, or with --no-native).
    cores: bool = True
    keep_cores: bool = False
    # How a crash's native stacks are read: "core" (the kernel's core file, falling back
    # to replay when cores are piped elsewhere) or "replay" (rerun the run under gdb).
    backtrace: str = "core"
    seed: int = 0
    perturbations: tuple[str, ...] = ()
    mode: str = "fresh"  # "fresh", "fork-server/fast" or "fork-server/full"
    replay: str = ""  # the command that reruns this run (same seed and perturbations)


@dataclass
class HangContext:
    """What a native capture hook receives when a run's deadline passes."""

    spec: RunSpec
    pids: list[int]
    python_stacks: dict[str, str]


class CaptureHook(Protocol):
    def __call__(self, context: HangContext) -> list[dict[str, Any]]: ...


@functools.cache
def child_path_dir() -> Path:
    """A folder holding only a link to this package, for the child's sys.path.

    Putting the supervisor's site-packages on a child's path would mix in
    extension modules built for another interpreter (with --python).
    """
    package = Path(__file__).resolve().parent
    folder = cache_dir() / "childpath" / hashlib.sha256(str(package).encode()).hexdigest()[:12]
    link = folder / "lifeguard"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".lifeguard.{os.getpid()}.{threading.get_ident()}"
        os.symlink(package, tmp)
        os.replace(tmp, link)
    return folder


PRECOMPILE_TIMEOUT = 60.0
CHILD_SIDE_MODULES = ("__init__.py", "bootstrap.py", "child.py", "forkserver_child.py")


@functools.cache
def precompile_child_side(executable: str) -> None:
    """Byte-compile the modules every child imports, for the child's interpreter, once.

    Without cached bytecode (PYTHONDONTWRITEBYTECODE, a fresh checkout, another
    Python version) every run would compile them again: milliseconds per run.
    Best effort: a read-only install just goes without.
    """
    package = Path(__file__).resolve().parent
    files = [str(package / name) for name in CHILD_SIDE_MODULES]
    try:
        subprocess.run([executable, "-m", "py_compile", *files], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PRECOMPILE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


BOOT_SCRIPT = "lifeguard_boot.py"


def boot_script(path_dir: Path) -> Path:
    """The child bootstrap as a script file, for tools that pass arguments through a
    shell (gdb's ``run``): no quoting to get wrong, unlike ``-c CODE``."""
    script = path_dir / BOOT_SCRIPT
    if not script.exists():
        tmp = path_dir / f".{BOOT_SCRIPT}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text("from lifeguard import bootstrap\n\nbootstrap.main()\n")
        os.replace(tmp, script)
    return script


def child_argv(spec: RunSpec, path_dir: Path) -> list[str]:
    boot = f"import sys; sys.path.insert(0, {str(path_dir)!r}); from lifeguard import bootstrap; bootstrap.main()"
    return [spec.interpreter.executable, "-X", "faulthandler", "-u", *spec.python_flags, "-c", boot]


def _tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return text if size <= limit else "[...]\n" + text.partition("\n")[2]


def _cap_output(path: Path, cap: int) -> None:
    """Keep an output file under ``cap`` while the child writes to it.

    The child's descriptor is O_APPEND, so after truncation its writes land at
    the new end: we keep the newest half and mark what was dropped.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size <= cap:
        return
    keep = cap // 2
    with open(path, "r+b") as f:
        f.seek(size - keep)
        newest = f.read(keep)
        f.seek(0)
        f.truncate()
        f.write(f"[lifeguard: {size - keep} bytes of output dropped]\n".encode() + newest)


EVENTS_FILE = "events.txt"


def read_events(path: Path) -> list[dict[str, Any]]:
    """The result channel: one Python-literal dict a line (see child.emit)."""
    events = []
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    event = ast.literal_eval(line.decode(errors="replace"))
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue  # a line cut short by a crash mid-write
                if isinstance(event, dict) and "event" in event:
                    events.append(event)
    except OSError:
        pass
    return events


def phase_of(events: list[dict[str, Any]], main_pid: int) -> Phase:
    mine = {e["event"] for e in events if e.get("pid") == main_pid}
    if "body-error" in mine:
        return Phase.RUN
    if "body-end" in mine:
        return Phase.EXIT
    if "body-start" in mine:
        return Phase.RUN
    return Phase.IMPORT


class ChildHandle(Protocol):
    """A started run's main process, however it was started (spawned, or forked by a server)."""

    pid: int

    def wait_step(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; True once the process has exited."""
        ...

    @property
    def returncode(self) -> int | None: ...

    def reap(self, timeout: float) -> None:
        """Collect the exit status after a kill (bounded)."""
        ...


class PopenHandle:
    """A fresh child started with Popen, waited on through a pidfd (no polling latency)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        try:
            self._pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._pidfd = None  # old kernel: fall back to short sleeps

    def wait_step(self, timeout: float) -> bool:
        if self.proc.poll() is not None:
            self._close()
            return True
        if self._pidfd is not None:
            select.select([self._pidfd], [], [], timeout)
        else:
            time.sleep(min(timeout, 0.005))
        if self.proc.poll() is not None:
            self._close()
            return True
        return False

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def reap(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state): reported by the leak checks
        self._close()

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _wait_exit(handle: ChildHandle, deadline: float, cancel: threading.Event | None,
               outputs: tuple[Path, ...], cap: int) -> bool:
    """Wait for the child until the deadline; True if it exited."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return handle.wait_step(0)
        if cancel is not None and cancel.is_set():
            raise RunInterrupted()
        if handle.wait_step(min(remaining, POLL_INTERVAL)):
            return True
        for out in outputs:
            _cap_output(out, cap)


def dump_python_stacks(pids: list[int], run_dir: Path) -> dict[str, str]:
    """Ask every Python process of the tree for a faulthandler dump of all threads."""
    sizes: dict[int, int] = {}
    for pid in pids:
        if not signal_caught(pid, DUMP_SIGNAL):
            continue  # not one of ours (or not Python): the signal would kill it
        dump = run_dir / f"faulthandler-{pid}.txt"
        sizes[pid] = dump.stat().st_size if dump.exists() else 0
        try:
            os.kill(pid, DUMP_SIGNAL)
        except ProcessLookupError:
            sizes.pop(pid)
    deadline = time.monotonic() + DUMP_TIMEOUT
    pending = set(sizes)
    stable: dict[int, int] = {}
    while pending and time.monotonic() < deadline:
        time.sleep(0.01)
        for pid in list(pending):
            dump = run_dir / f"faulthandler-{pid}.txt"
            size = dump.stat().st_size if dump.exists() else 0
            # Done when the dump grew and stopped growing between two looks.
            if size > sizes[pid] and stable.get(pid) == size:
                pending.discard(pid)
            stable[pid] = size
    stacks = {}
    for pid in sorted(sizes):
        text = (run_dir / f"faulthandler-{pid}.txt").read_text(errors="replace") if (
            run_dir / f"faulthandler-{pid}.txt").exists() else ""
        if text.strip():
            stacks[str(pid)] = text[-64 * 1024:]
    return stacks


@dataclass(frozen=True)
class RunFiles:
    """The run's folder and the files the child writes (opened by the supervisor)."""

    run_dir: Path
    stdout: Path
    stderr: Path
    events: Path

    @classmethod
    def create(cls, run_dir: Path) -> tuple[RunFiles, tuple[int, int, int]]:
        """Make the folder and open (events, stdout, stderr) for the child: O_APPEND, so
        lines from several processes never interleave and capping can truncate."""
        if run_dir.exists():  # a folder left by an earlier session: its files would mix with ours
            shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        files = cls(run_dir, run_dir / "stdout.txt", run_dir / "stderr.txt", run_dir / EVENTS_FILE)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC | os.O_CLOEXEC
        fds = (os.open(files.events, flags, 0o644), os.open(files.stdout, flags, 0o644),
               os.open(files.stderr, flags, 0o644))
        return files, fds


def child_spec(spec: RunSpec) -> dict[str, Any]:
    """What the child bootstrap needs to know (sent as JSON)."""
    return {
        "kind": spec.kind, "path": spec.path, "function": spec.function, "code": spec.code,
        "fixture": spec.fixture, "fixture_dir": spec.fixture_dir, "run_dir": str(spec.run_dir),
        "dump_signal": int(DUMP_SIGNAL), "argv": list(spec.argv), "cores": spec.cores and spec.backtrace == "core",
        "seed": spec.seed, "perturbations": list(spec.perturbations), "variant": spec.variant,
        "exit": "fast" if spec.mode == "fork-server/fast" else "full",
    }


def child_env(spec: RunSpec, run_id: str, events_fd: int) -> dict[str, str]:
    """The environment entries lifeguard adds for a run."""
    env = dict(spec.env)
    env.update({CHILD_ENV: "1", RUN_MARKER_ENV: run_id, EVENTS_ENV: str(events_fd), VARIANT_ENV: spec.variant})
    return env


def run_once(spec: RunSpec, *, cancel: threading.Event | None = None,
             capture_hooks: tuple[CaptureHook, ...] = (),
             output_cap: int = DEFAULT_OUTPUT_CAP,
             on_start: Callable[[int], None] | None = None) -> RunResult:
    """Run ``spec`` in a fresh child and return its classified result."""
    precompile_child_side(spec.interpreter.executable)
    files, (events_fd, out_fd, err_fd) = RunFiles.create(spec.run_dir)
    run_id = uuid.uuid4().hex
    env = dict(os.environ)
    env.update(child_env(spec, run_id, events_fd))
    env["LIFEGUARD_SPEC"] = repr(child_spec(spec))
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            child_argv(spec, child_path_dir()), cwd=files.run_dir, env=env, stdin=subprocess.DEVNULL,
            stdout=out_fd, stderr=err_fd, pass_fds=(events_fd,), start_new_session=True,
        )
    finally:
        os.close(events_fd)
        os.close(out_fd)
        os.close(err_fd)
    if on_start is not None:
        on_start(proc.pid)
    return supervise(spec, PopenHandle(proc), run_id, files, started, cancel=cancel,
                     capture_hooks=capture_hooks, output_cap=output_cap)


def supervise(spec: RunSpec, handle: ChildHandle, run_id: str, files: RunFiles, started: float, *,
              cancel: threading.Event | None = None, capture_hooks: tuple[CaptureHook, ...] = (),
              output_cap: int = DEFAULT_OUTPUT_CAP) -> RunResult:
    """Watch a started run to its end: deadline, escalation ladder, leftovers, verdict data."""
    python_stacks: dict[str, str] = {}
    backtraces: list[dict[str, Any]] = []
    leftovers: list[dict[str, Any]] = []
    hung = False
    hung_pids: list[int] = []
    phase_at_deadline: Phase | None = None
    try:
        exited = _wait_exit(handle, started + spec.timeout, cancel, (files.stdout, files.stderr), output_cap)
        if not exited:
            hung = True
            hung_pids = run_tree(handle.pid, run_id)
            # The phase is what the tree was doing at the deadline: the dump
            # signal below may interrupt a blocking call and let the body move on.
            phase_at_deadline = phase_of(read_events(files.events), handle.pid)
            # Native capture first: the dump signal interrupts blocking calls (a join
            # wakes up and queues for the GIL), which would change the very deadlock
            # gdb is about to show. The faulthandler dumps come right after.
            context = HangContext(spec, hung_pids, {})
            for hook in capture_hooks:
                try:
                    backtraces.extend(hook(context))
                except Exception as exc:  # a capture failure must not lose the run
                    backtraces.append({"error": f"capture hook failed: {exc!r}"})
            python_stacks = dump_python_stacks(hung_pids, files.run_dir)
            if backtraces and python_stacks:
                from lifeguard.native import merge_python_stacks

                backtraces = merge_python_stacks(backtraces, python_stacks)
        else:
            left = leftovers_after_exit(handle.pid, run_id)
            if left:
                time.sleep(LEFTOVER_GRACE)
                left = leftovers_after_exit(handle.pid, run_id)
            for pid in left:
                info = read_proc(pid)
                leftovers.append({"pid": pid, "comm": info.comm if info else "?", "ppid": info.ppid if info else None})
    except BaseException:  # cancelled, Ctrl-C in this thread, or our own bug: never leave the tree behind
        killed = kill_tree(handle.pid, run_id)
        _finish(handle, killed)
        raise
    finally:
        if hung or leftovers:
            killed = kill_tree(handle.pid, run_id)
            _finish(handle, killed)
    duration = time.monotonic() - started
    result = classify(spec, handle.pid, None if hung else handle.returncode, duration, hung=hung,
                      hung_pids=hung_pids, python_stacks=python_stacks, backtraces=backtraces,
                      leftovers=leftovers, phase_at_deadline=phase_at_deadline)
    return explain(spec, result)


def explain(spec: RunSpec, result: RunResult) -> RunResult:
    """Add native crash stacks (from cores) and findings to a failed run; passing runs pay nothing."""
    if result.outcome is Outcome.PASSED:
        return result
    notes = list(result.notes)
    backtraces = list(result.backtraces)
    from lifeguard.cores import core_setup, find_cores

    if spec.cores and (result.outcome is Outcome.CRASHED or find_cores(spec.run_dir)):
        from lifeguard.native import analyse_crash_cores, replay_under_gdb

        replay = spec.backtrace == "replay"
        if not replay:
            setup = core_setup()
            if not setup.usable and not find_cores(spec.run_dir):
                notes.append(setup.note + " Falling back to a replay under gdb.")
                replay = result.outcome is Outcome.CRASHED
        try:
            if replay:
                path_dir = child_path_dir()
                argv = [spec.interpreter.executable, "-X", "faulthandler", "-u", *spec.python_flags,
                        str(boot_script(path_dir))]
                backtraces.extend(replay_under_gdb(spec, argv))
            else:
                backtraces.extend(analyse_crash_cores(spec.run_dir, spec.interpreter.executable,
                                                      keep=spec.keep_cores))
        except Exception as exc:  # evidence is best effort; the outcome stands
            notes.append(f"native crash analysis failed: {exc!r}")
    if not spec.cores and result.outcome in (Outcome.CRASHED, Outcome.HUNG):
        notes.append("native stacks not captured for this run (--no-native, or this series already has them)")
    elif not backtraces and result.outcome in (Outcome.CRASHED, Outcome.HUNG):
        from lifeguard.native import gdb_missing_note

        missing = gdb_missing_note()
        if missing:
            notes.append(missing)
    result = replace(result, backtraces=backtraces, notes=notes)
    from lifeguard.diagnose import diagnose

    try:
        findings = [f.to_dict() for f in diagnose(result)]
    except Exception as exc:  # a rule's bug must not lose the run
        findings = [{"kind": "internal", "summary": f"diagnosis failed: {exc!r}", "hint": ""}]
    result = replace(result, findings=findings)
    return replace(result, evidence={**result.evidence, **write_artifacts(result)})


def write_artifacts(result: RunResult) -> dict[str, str]:
    """The readable evidence of a failed run, as files in its folder."""
    run_dir = Path(result.run_dir)
    written = {}
    texts = [b["text"] for b in result.backtraces if b.get("text")]
    errors = [b["error"] for b in result.backtraces if b.get("error") and not b.get("text")]
    if texts or errors:
        path = run_dir / "backtraces.txt"
        path.write_text("\n".join(texts + [f"capture error: {e}" for e in errors]))
        written["backtraces"] = str(path)
    if result.findings:
        path = run_dir / "findings.txt"
        lines = []
        for finding in result.findings:
            lines.append(f"[{finding.get('kind')}] {finding.get('summary')}")
            lines.extend(f"    {frame}" for frame in finding.get("frames", []))
            if finding.get("hint"):
                lines.append(f"  fix: {finding['hint']}")
        path.write_text("\n".join(lines) + "\n")
        written["findings"] = str(path)
    return written


def _finish(handle: ChildHandle, killed: list[int]) -> None:
    handle.reap(timeout=5)
    reap_orphans([p for p in killed if p != handle.pid])


def classify(spec: RunSpec, main_pid: int, rc: int | None, duration: float, *, hung: bool,
             hung_pids: list[int], python_stacks: dict[str, str], backtraces: list[dict[str, Any]],
             leftovers: list[dict[str, Any]], phase_at_deadline: Phase | None = None) -> RunResult:
    run_dir = spec.run_dir
    events = read_events(run_dir / EVENTS_FILE)
    stderr_tail = _tail(run_dir / "stderr.txt")
    stdout_tail = _tail(run_dir / "stdout.txt")
    phase: Phase | None = phase_of(events, main_pid)
    signum = -rc if rc is not None and rc < 0 else None
    fatal = FATAL_RE.search(stderr_tail)
    corruption = [e for e in events if e["event"] == "corrupted"]
    forked = {e["pid"] for e in events if e["event"] == "forked"}
    if hung:
        outcome = Outcome.HUNG
        phase = phase_at_deadline or phase
        stuck_forks = [p for p in hung_pids if p in forked]
        if stuck_forks:
            phase = Phase.FORK_CHILD
        reason = f"deadline of {spec.timeout:g} s passed; {len(hung_pids)} process(es) alive"
    elif signum is not None:
        outcome = Outcome.CRASHED
        reason = f"killed by {signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum}"
        if fatal:
            reason += f" after 'Fatal Python error: {fatal.group(1)}'"
    elif fatal:
        outcome = Outcome.CRASHED
        reason = f"Fatal Python error: {fatal.group(1)}"
    elif corruption:
        outcome = Outcome.CORRUPTED
        reason = f"scenario reported corruption: {corruption[0].get('message', '')}"
        first_pid = corruption[0].get("pid")
        if first_pid != main_pid and first_pid in forked:
            phase = Phase.FORK_CHILD
        else:  # the phase the body was in when it saw the broken data
            phase = phase_of(events[: events.index(corruption[0])], main_pid)
    elif rc != 0:
        outcome = Outcome.FAILED
        errors = [e for e in events if e["event"] == "body-error" and e.get("pid") == main_pid]
        reason = errors[0]["error"] if errors else f"exit code {rc}"
    elif leftovers:
        outcome = Outcome.FAILED
        phase = Phase.EXIT
        names = ", ".join(f"{p['pid']} ({p['comm']})" for p in leftovers)
        reason = f"left processes running after exit: {names}"
    else:
        outcome = Outcome.PASSED
        phase = None
        reason = ""
    evidence = {name: str(run_dir / name) for name in ("stdout.txt", "stderr.txt", EVENTS_FILE)}
    for pid in python_stacks:
        evidence[f"faulthandler-{pid}"] = str(run_dir / f"faulthandler-{pid}.txt")
    return RunResult(
        scenario=spec.scenario, variant=spec.variant, index=spec.index, outcome=outcome, phase=phase,
        expected=spec.expected, signal=signum, exit_code=rc, duration=round(duration, 4),
        python=spec.interpreter.version_text, run_dir=str(run_dir), reason=reason,
        fatal_error=fatal.group(1) if fatal else None,
        corruption=[{k: v for k, v in e.items() if k not in ("event", "time")} for e in corruption],
        leftover_processes=leftovers, evidence=evidence, stdout_tail=stdout_tail, stderr_tail=stderr_tail,
        python_stacks=python_stacks, backtraces=backtraces,
        events=[e for e in events if e["event"] not in ("started",)][:200],
        seed=spec.seed, perturbations=list(spec.perturbations), mode=spec.mode, replay=spec.replay,
    )
