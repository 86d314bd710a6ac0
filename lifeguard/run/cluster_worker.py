"""The half of a cluster run that executes on a Dask worker (``lifeguard run --scheduler ADDRESS``).

Each task is one run: the same supervision as a local run (run_once: this worker's own subreaper or cgroup,
watchdog, deadline, capture, tree kill), then the same diagnosis, handed in by the supervisor. A run's
evidence is written where the supervisor asked when the worker sees that folder (a filesystem they share);
otherwise into a folder of the worker's, shipped back with the result (bounded), and removed.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lifeguard.child.protocol import CLUSTER_PRIVATE_ENV
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.run.supervise import CaptureHook, run_once

# A failed run's files shipped back to the supervisor: at most this much in all (cores are not shipped).
SHIPPED_BYTES = 32 * 1024 * 1024
SHARED_MARKER = ".lifeguard-shared"  # written by the supervisor in its runs folder: a worker that sees it shares it
CANCEL_POLL = 0.5  # how often the worker looks at the session's cancel event


class WrongInterpreter(RuntimeError):
    """The worker has not the interpreter the plan runs under: the run cannot be judged there."""


@functools.cache
def _interpreter_version(executable: str) -> str:
    """Asked once per worker and interpreter (a child process: too dear for every run)."""
    import subprocess

    return subprocess.run([executable, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
                          capture_output=True, text=True, timeout=30, check=False).stdout.strip()


def _check_interpreter(spec: RunSpec) -> None:
    executable = spec.interpreter.executable
    if not os.path.exists(executable):
        raise WrongInterpreter(f"worker has no {executable} (the plan's interpreter)")
    out = _interpreter_version(executable)
    if out != spec.interpreter.version_text:
        raise WrongInterpreter(f"worker's {executable} is Python {out or '?'}, the plan's is "
                               f"{spec.interpreter.version_text}")


_cancels: dict[str, threading.Event] = {}  # a session's cancel event -> its flag in this worker process
_cancels_lock = threading.Lock()


def _watch_cancel(name: str, cancel: threading.Event) -> None:
    """Mirror the session's Dask event into this worker's flag for it (one thread a session and worker)."""
    from distributed import Event

    event = Event(name)
    while True:
        try:
            if event.wait(timeout=CANCEL_POLL * 20):
                cancel.set()
                return
        except Exception:  # the scheduler is gone: each run's own deadline still bounds it
            return


def cancel_flag(name: str) -> threading.Event:
    """The flag every run of the session ``name`` on this worker watches, and the thread that sets it."""
    with _cancels_lock:
        flag = _cancels.get(name)
        if flag is None:
            flag = _cancels[name] = threading.Event()
            threading.Thread(target=_watch_cancel, args=(name, flag), daemon=True,
                             name="lifeguard-cluster-cancel").start()
        return flag


@functools.cache
def _queue(name: str) -> Any:
    """The session's queue of started runs, made once per worker process (each made is a round trip)."""
    from distributed import Queue

    return Queue(name)


def _ship(run_dir: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    left = SHIPPED_BYTES
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or path.name.startswith("core"):
            continue
        size = path.stat().st_size
        if size > left:
            continue
        files[str(path.relative_to(run_dir))] = path.read_bytes()
        left -= size
    return files


def _with_fixture_built_here(spec: RunSpec) -> RunSpec:
    """A run of a fixture's variant whose build the supervisor made on another machine: built here, from the
    sources at the plan's paths, into this worker's cache (once: the cache is keyed by content)."""
    if not spec.fixture or (spec.fixture_dir and os.path.isdir(spec.fixture_dir)):
        return spec
    from lifeguard.build import build_fixture
    from lifeguard.interpreter import resolve

    built = build_fixture(spec.fixture, spec.variant, resolve(spec.interpreter.executable), near=Path(spec.path).parent)
    return replace(spec, fixture_dir=str(built.directory))


def remote_run(spec: RunSpec, explain: Callable[[RunSpec, RunResult], RunResult],
               capture_hooks: tuple[CaptureHook, ...], cancel_name: str, started_queue: str,
               key: str) -> tuple[RunResult, dict[str, bytes], str]:
    """Run ``spec`` here; returns (the explained result, shipped files (empty when shared), this worker)."""
    from distributed import get_worker

    worker = get_worker().address
    try:
        _queue(started_queue).put((key, worker), timeout=5)  # the supervisor learns of a re-run after a loss
    except Exception:
        pass
    _check_interpreter(spec)
    spec = _with_fixture_built_here(spec)
    shared = (spec.run_dir.parent / SHARED_MARKER).exists() and os.environ.get(CLUSTER_PRIVATE_ENV) != "1"
    local_dir = None
    if not shared:
        local_dir = Path(tempfile.mkdtemp(prefix="lifeguard-cluster-"))
        spec = replace(spec, run_dir=local_dir / spec.run_dir.name)
    try:
        result = explain(spec, run_once(spec, cancel=cancel_flag(cancel_name), capture_hooks=capture_hooks))
        files = _ship(spec.run_dir) if local_dir is not None and spec.run_dir.exists() else {}
        return result, files, worker
    finally:
        if local_dir is not None:
            shutil.rmtree(local_dir, ignore_errors=True)
