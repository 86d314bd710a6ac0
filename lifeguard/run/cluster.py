"""A Dask cluster as the executor of a session (``lifeguard run --scheduler tcp://HOST:PORT``).

Dask does the distribution: each run is one task (lifeguard.run.cluster_worker.remote_run) that a worker
runs under the same supervision and diagnosis as a local run. The engine's worker threads submit runs as
they go (one a worker thread of the cluster), so results stream into the same sinks as they finish, and
``--until-fail`` and ``-x`` stop the campaign as they stop a local one. Ctrl-C sets the session's Dask event,
which every running task watches: each kills its run's tree on its worker. A run whose worker is lost is
run again by Dask on another worker (the loss is recorded in its notes).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lifeguard.errors import ClusterError
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.run.cluster_worker import SHARED_MARKER, remote_run
from lifeguard.run.supervise import CaptureHook, RunInterrupted

CONNECT_TIMEOUT = 30.0  # the scheduler's answer to our connection
RESULT_POLL = 0.25  # how often a submitted run's wait looks at the cancel flag
# How long past its own deadline the supervisor waits for a run's result: the run itself ends on its worker
# within its deadline + the capture budget; the rest is the cluster's (the run queued behind another on its
# worker, a lost worker's run run again, a busy scheduler). Past it, the run is lifeguard's own error.
QUEUE_SLACK = 3600.0
CANCELLED_RERUNS = 3  # a run the cluster cancelled (its client reconnected to the scheduler) is run again


def _cancelled_reason(future: Any) -> str:
    """Why Dask cancelled a future (its state's exception says; "unknown" when this Dask keeps no reason)."""
    exception = getattr(getattr(future, "_state", None), "exception", None)
    return str(getattr(exception, "reason", None) or "unknown")


class ClusterExecutor:
    """Runs specs on a Dask cluster, one task a run; thread-safe (the engine's worker threads share it)."""

    def __init__(self, address: str, explain: Callable[[RunSpec, RunResult], RunResult],
                 capture_hooks: tuple[CaptureHook, ...]) -> None:
        try:
            from distributed import Client, Event, Queue
        except ImportError:
            raise ClusterError("--scheduler needs Dask's distributed package: pip install 'lifeguard[dask]'") from None
        try:
            self.client = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"--scheduler {address}: cannot connect ({exc})") from None
        token = os.urandom(8).hex()
        self.cancel_name = f"lifeguard-cancel-{token}"
        self.started_name = f"lifeguard-started-{token}"
        self._cancel_event = Event(self.cancel_name, client=self.client)
        self._started = Queue(self.started_name, client=self.client)
        self._starts: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self.explain = explain
        self.capture_hooks = capture_hooks

    @property
    def slots(self) -> int:
        """Runs the cluster runs at once: its workers' threads."""
        threads: dict[str, int] = self.client.nthreads()
        return max(1, sum(threads.values()))

    def prepare(self, runs_dir: Path) -> None:
        """Before the first run: a marker in the runs folder tells a worker that sees it that it shares it."""
        runs_dir.mkdir(parents=True, exist_ok=True)
        (runs_dir / SHARED_MARKER).write_text("lifeguard runs folder\n")

    def _note_starts(self) -> None:
        try:
            items = self._started.get(batch=True)  # all waiting, at once; [] when none
        except Exception:  # the scheduler went away
            return
        with self._lock:
            for key, worker in items:
                self._starts.setdefault(key, []).append(worker)

    def run(self, spec: RunSpec, *, cancel: threading.Event) -> RunResult:
        reasons: list[str] = []
        for attempt in range(CANCELLED_RERUNS + 1):
            # Dask does not stop a cancelled task that is under way: a run again gets a folder of its own, so
            # the two never write into one folder (on a filesystem the workers share).
            this = spec if not attempt else replace(spec, run_dir=spec.run_dir.with_name(
                f"{spec.run_dir.name}-again-{attempt}"))
            key = f"lifeguard-run-{os.urandom(8).hex()}"
            future = self.client.submit(remote_run, this, self.explain, self.capture_hooks, self.cancel_name,
                                        self.started_name, key, key=key, pure=False)
            try:
                outcome = self._outcome(future, this, cancel)
            finally:
                self._note_starts()
            if isinstance(outcome, str):  # the cluster cancelled it (its reason): run it again
                reasons.append(outcome)
                with self._lock:
                    self._starts.pop(key, None)
                continue
            result, files, worker = outcome
            result = self._received(this, result, files, worker, key)
            if reasons:
                note = (f"the cluster cancelled it {len(reasons)} time(s) ({', '.join(sorted(set(reasons)))}): "
                        "run again")
                result = replace(result, notes=(*result.notes, note))
            return result
        raise ClusterError(f"run {spec.scenario}[{spec.variant}]#{spec.index}: the cluster cancelled it "
                           f"{len(reasons)} times ({', '.join(sorted(set(reasons)))})")

    def _outcome(self, future: Any, spec: RunSpec,
                 cancel: threading.Event) -> tuple[RunResult, dict[str, bytes], str] | str:
        """A submitted run's result, or why the cluster cancelled it.

        The wait looks at the future's own state, not ``future.result(timeout=...)`` in a loop: that call
        raises ``UnboundLocalError`` instead of the cancellation when the cluster cancels the future (for
        one, when the client's connection to the scheduler drops: dask/distributed#8514).
        """
        deadline = time.monotonic() + spec.timeout + QUEUE_SLACK
        while not future.done():
            if cancel.wait(RESULT_POLL):
                self._cancel_event.set()  # every running task kills its run's tree on its worker
                future.cancel()
                raise RunInterrupted()
            if time.monotonic() > deadline:
                future.cancel()
                raise ClusterError(f"run {spec.scenario}[{spec.variant}]#{spec.index} got no result from "
                                   "the cluster in time")
        if future.cancelled():
            return _cancelled_reason(future)
        try:  # done: the result is fetched from its worker (bounded: a worker lost meanwhile recomputes it)
            outcome: tuple[RunResult, dict[str, bytes], str] = future.result(timeout=spec.timeout + QUEUE_SLACK)
        except (UnboundLocalError, TimeoutError):
            if future.cancelled():  # cancelled while its result was fetched
                return _cancelled_reason(future)
            raise
        return outcome

    def _received(self, spec: RunSpec, result: RunResult, files: dict[str, bytes], worker: str,
                  key: str) -> RunResult:
        """The result where the supervisor keeps it: shipped files written into the run's folder here."""
        if files:
            spec.run_dir.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                target = spec.run_dir / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            shipped_from = result.run_dir
            evidence = {n: p.replace(shipped_from, str(spec.run_dir), 1) for n, p in result.evidence.items()}
            result = replace(result, run_dir=str(spec.run_dir), evidence=evidence)
        notes = [f"ran on the cluster's worker {worker}"]
        with self._lock:
            starts = self._starts.pop(key, [])
        lost = [w for w in starts if w != worker]
        if len(starts) > 1 or lost:
            notes.append(f"its first worker ({', '.join(lost) or worker}) was lost while it ran: run again on "
                         f"{worker}")
        return replace(result, notes=(*result.notes, *notes))

    def close(self) -> None:
        try:
            self.client.close(timeout=CONNECT_TIMEOUT)
        except Exception:
            pass

