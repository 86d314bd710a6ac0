"""The engine the CLI and the pytest plugin share: plan, build, execute, judge."""

from __future__ import annotations

import functools
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lifeguard.cache import prune_sessions, session_folder
from lifeguard.errors import DiskFullError, LifeguardError
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import RunResult, SeriesSummary, Session
from lifeguard.model.run import RunSpec, StartMode
from lifeguard.model.scenario import Scenario
from lifeguard.model.tally import SeriesTally
from lifeguard.plan.scheduler import PlanOptions, Scheduler, build_all, series_of
from lifeguard.run import headstart
from lifeguard.run.containment import containment
from lifeguard.run.launch import no_inherited_cores
from lifeguard.run.live import LiveOutput
from lifeguard.run.own_error import disk_full, error_result
from lifeguard.run.shutdown import shutdown
from lifeguard.run.sink import Sink, count_run, series_finished, tallies_for
from lifeguard.run.spares import RunFolders
from lifeguard.run.supervise import CaptureHook, RunInterrupted, run_once

if TYPE_CHECKING:
    from lifeguard.run.cluster import ClusterExecutor
    from lifeguard.run.forkserver import ForkServers


def summarise(tallies: dict[tuple[str, str], SeriesTally]) -> list[SeriesSummary]:
    return [tally.summary() for tally in tallies.values()]


# After Ctrl-C, how long the workers get to kill their runs' trees (each needs
# at most a poll interval plus a bounded kill-and-reap).
CANCEL_GRACE = 30.0


class Explain(Protocol):
    """Completes a failed run's evidence and findings after supervision (lifeguard.diagnose.explain)."""

    def __call__(self, spec: RunSpec, result: RunResult) -> RunResult: ...


def unexplained(spec: RunSpec, result: RunResult) -> RunResult:
    """No diagnosis: the result as supervision left it."""
    return result


class LazyServers:
    """The warm fork-servers, imported and started when the first run asks for one (most sessions never do)."""

    def __init__(self, interpreter: Interpreter) -> None:
        self.interpreter = interpreter
        self._lock = threading.Lock()
        self._servers: ForkServers | None = None

    def run(self, spec: RunSpec, *, cancel: threading.Event, capture_hooks: tuple[CaptureHook, ...],
            live: LiveOutput | None, meanwhile: Callable[[], None] | None = None,
            reuse: Path | None = None) -> RunResult:
        with self._lock:
            if self._servers is None:
                from lifeguard.run.forkserver import ForkServers

                self._servers = ForkServers(self.interpreter)
        return self._servers.run(spec, cancel=cancel, capture_hooks=capture_hooks, live=live, meanwhile=meanwhile,
                                 reuse=reuse)

    def close(self) -> None:
        with self._lock:
            if self._servers is not None:
                self._servers.close()


class Engine:
    """Runs a selection of scenarios and feeds every result to the sinks.

    Capture and diagnosis are handed in (``capture_hooks``, ``explain``): they sit in layers below
    this one, and a session builder (lifeguard.session.setup) wires them for every front end.
    ``keep_all_runs``: keep every run in ``Session.results``, passed ones included, in full (the pytest plugin
    hands them to its test); by default a session keeps only evidence (lifeguard.run.sink.RUNS_KEPT), so its
    memory stays flat.
    """

    def __init__(self, interpreter: Interpreter, *, jobs: int = 1, sinks: Sequence[Sink] = (),
                 capture_hooks: tuple[CaptureHook, ...] = (), explain: Explain = unexplained,
                 runs_dir: Path | None = None, live: LiveOutput | None = None,
                 on_compile: Callable[[str, str], None] | None = None, keep_all_runs: bool = False,
                 cluster: ClusterExecutor | None = None) -> None:
        self.interpreter = interpreter
        self.cluster = cluster  # runs go to a Dask cluster's workers instead of children of this process
        self.keep_all_runs = keep_all_runs
        self.explain = explain
        self.live = live  # where plain targets' output goes while they run
        self.on_compile = on_compile  # told (fixture, variant) before a build that is not cached
        self.jobs = max(1, jobs)
        self.sinks = list(sinks)
        self.capture_hooks = capture_hooks
        self.runs_dir = runs_dir.resolve() if runs_dir is not None else None
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self._exitfirst = False
        self._failure: BaseException | None = None  # a worker's own error, raised again in the main thread
        self._tallies: dict[tuple[str, str], SeriesTally] = {}

    def run(self, scenarios: list[Scenario], options: PlanOptions) -> Session:
        session = Session(self.interpreter, scenarios)
        series = series_of(scenarios, options)
        built = build_all(series, self.interpreter, on_compile=self.on_compile)
        self._exitfirst = options.exitfirst
        if any(item.is_plain and item.workdir for item in scenarios):
            no_inherited_cores()  # a plain target works in the user's folder: no core may land there
        temporary = self.runs_dir is None
        head = headstart.pending()  # a command started ahead of lifeguard's imports: its folder is the session's
        runs_dir = self.runs_dir or (Path(head.runs_dir) if head is not None else None) \
            or Path(session_folder())
        session.runs_dir = runs_dir
        if self.cluster is not None:
            self.cluster.prepare(runs_dir)
        scheduler = Scheduler(series, options, self.interpreter, built, runs_dir)
        self._tallies = tallies = tallies_for(session, scheduler.series_here())  # a shard: its own series
        session.base_seed = scheduler.base_seed
        session.plan = scheduler.fingerprint
        session.shard = f"{options.shard[0]}/{options.shard[1]}" if options.shard else ""
        # The subreaper, the session's cgroup folder and the watchdog, before the first run.
        session.membership = containment().mechanism
        servers = LazyServers(self.interpreter)  # starts a server only when a run asks for one
        for sink in self.sinks:
            sink.start(session, scheduler.total)
        began = time.monotonic()
        try:
            self._execute(scheduler, session, servers, began)
        except KeyboardInterrupt:
            session.interrupted = True
            self.cancel.set()
        finally:
            with shutdown.protected():  # a second stop signal must not cut the reports short
                servers.close()
                session.duration = time.monotonic() - began
                session.summaries = summarise(tallies)
                for sink in self.sinks:
                    sink.finish(session)
                if temporary and not any(tally.stats.failures for tally in tallies.values()):
                    shutil.rmtree(runs_dir, ignore_errors=True)
                if temporary:
                    prune_sessions()  # the user's older sessions' evidence, past the last few
        return session

    def _one(self, spec: RunSpec, servers: LazyServers, began: float, folders: RunFolders) -> RunResult | None:
        """Run ``spec`` to its result; ``folders``: the worker's passed runs' folders, recycled while this run's
        child starts (lifeguard.run.spares), so that neither removing them nor making this one's folder is on
        the path from one run to the next."""
        if self.cancel.is_set():
            return None
        seen: RunResult | None = None
        try:
            hooks = self.capture_hooks if spec.cores else ()
            live = self.live if spec.plain else None
            tidy = functools.partial(folders.tidy, spec.run_dir)
            if self.cluster is not None:  # supervised and explained on a worker of the cluster
                seen = result = self.cluster.run(spec, cancel=self.cancel)
            elif spec.mode is StartMode.FRESH:
                seen = run_once(spec, cancel=self.cancel, capture_hooks=hooks, live=live, meanwhile=tidy,
                                reuse=folders.spare(spec.run_dir))
            else:
                seen = servers.run(spec, cancel=self.cancel, capture_hooks=hooks, live=live, meanwhile=tidy,
                                   reuse=folders.spare(spec.run_dir))
            # A failed run gets its evidence and findings; a passed one only a look for core files (a forked
            # child may have crashed while its parent carried on), so passing runs pay one listdir.
            if self.cluster is None:
                result = self.explain(spec, seen)
            if result.outcome is Outcome.PASSED:
                if self.cluster is None:
                    folders.discard(spec.run_dir)
                else:
                    shutil.rmtree(spec.run_dir, ignore_errors=True)
        except RunInterrupted:
            return None
        except Exception as exc:  # lifeguard's own fault for this run: recorded as an `error` run, never lost
            if isinstance(exc, LifeguardError) and seen is None:
                raise  # said on purpose before anything ran (a command that cannot start): the session stops
            result = error_result(spec, exc, during="supervising" if seen is None else "explaining", seen=seen)
            if disk_full(exc) or isinstance(exc, LifeguardError):  # the next runs would fail alike: stop
                stop = DiskFullError(getattr(exc, "filename", None) or spec.run_dir) if disk_full(exc) else exc
                with self._lock:
                    self._failure = self._failure or stop  # raised in the main thread when the runs are in
        return replace(result, finished_at=round(time.monotonic() - began, 4))

    def _deliver(self, session: Session, scheduler: Scheduler, result: RunResult | None) -> None:
        if result is None:
            return
        scheduler.record(result)
        with self._lock:
            tally = self._tallies[(result.scenario, result.variant)]
            count_run(session, tally, result, self.sinks, keep_all=self.keep_all_runs)
            if scheduler.series_done(result.scenario, result.variant, tally.runs):
                series_finished(tally.summary(), self.sinks)
            if (self._exitfirst and not session.stopped
                    and scheduler.settled_unexpected(result, tally.runs, tally.verdict())):
                session.stopped = True  # -x: no new run starts; runs already under way finish
                scheduler.stop()

    def _worker(self, scheduler: Scheduler, session: Session, servers: LazyServers, began: float) -> None:
        folders = RunFolders()
        try:
            while not self.cancel.is_set() and self._failure is None:
                spec = scheduler.next_spec()
                if spec is None:
                    return
                self._deliver(session, scheduler, self._one(spec, servers, began, folders))
        except Exception as exc:  # lifeguard's own error outside a run (a sink, the plan): the session ends with it
            with self._lock:
                self._failure = self._failure or exc
        finally:
            folders.remove_all()
            if self._failure is not None:  # no new run starts; runs under way finish and are recorded
                scheduler.stop()
                with self._lock:
                    failure = self._failure
                    session.failure = session.failure or (str(failure) if isinstance(failure, LifeguardError)
                                                          else f"{type(failure).__name__}: {failure}")

    def _execute(self, scheduler: Scheduler, session: Session, servers: LazyServers, began: float) -> None:
        if self.jobs == 1:
            self._worker(scheduler, session, servers, began)
            self._raise_failure()
            return
        # The main thread waits on an Event, not Thread.join: a join interrupted by
        # Ctrl-C can mark a live thread as finished (CPython gh-90882), and the
        # worker would be left killing its tree after we returned.
        remaining = [self.jobs]
        count_lock = threading.Lock()
        all_done = threading.Event()

        def work() -> None:
            try:
                self._worker(scheduler, session, servers, began)
            finally:
                with count_lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        all_done.set()

        for n in range(self.jobs):
            threading.Thread(target=work, name=f"lifeguard-run-{n}", daemon=True).start()
        try:
            while not all_done.wait(0.5):  # bounded waits keep the main thread responsive to Ctrl-C
                pass
        except BaseException:
            self.cancel.set()
            # Workers notice the cancel flag within a poll interval and kill their trees.
            all_done.wait(CANCEL_GRACE)
            raise
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
