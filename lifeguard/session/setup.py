"""One session builder for every front end: ``lifeguard run``, ``lifeguard probe`` and the pytest plugin.

It wires what the engine gets handed (sinks, live output, native capture hooks, diagnosis), so no front end
builds an engine by hand, and turns the session into the exit code DESIGN.md promises.

Diagnosis and native capture are imported when a run first needs them (a failure, a hang:
lifeguard.session.evidence_hooks): a session whose runs all pass never loads them, which keeps ``lifeguard run``
around a short program cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeguard.build import cache_dir, unwritable_cache
from lifeguard.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_LIFETIME,
    EXIT_OK,
    EXIT_UNEXPECTED,
    BuildCacheError,
)
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Session
from lifeguard.model.scenario import Scenario, check_unique_names
from lifeguard.plan.scheduler import PlanOptions
from lifeguard.report.live import TerminalEcho
from lifeguard.report.sinks import sinks_for
from lifeguard.report.terminal import TerminalSink, exited_on_its_own
from lifeguard.run.engine import Engine
from lifeguard.run.launch import child_path_dir
from lifeguard.run.supervise import CaptureHook
from lifeguard.session.evidence_hooks import capture_hang, explain_failure


@dataclass(frozen=True)
class SessionSetup:
    """How a front end wants its session run and reported."""

    interpreter: Interpreter
    jobs: int = 1
    terminal: bool = True  # progress, verdicts and evidence on stdout
    verbose: bool = False  # every run as it finishes
    report_dir: Path | None = None  # results.jsonl, report.json, junit.xml, report.html
    runs_dir: Path | None = None  # failed runs' folders; default REPORT/runs, else a temporary folder
    native: bool = True  # gdb on hangs, cores on crashes (when gdb is installed)
    quiet: bool = False  # results only: no header, progress, compile lines or live output
    live_prefix: bool = False  # several plain runs: each live line starts with its run's name
    color: str = "auto"  # --color: auto (report.terminal.use_color), yes, no
    keep_all_runs: bool = False  # Session.results holds every run, not only the evidence (Engine)
    scheduler: str | None = None  # a Dask scheduler's address: the runs go to its workers (run.cluster)
    alone: bool = False  # one plain target run once, no --expect (a CI step): exit codes of exit_code(alone=True)


def run_session(scenarios: Sequence[Scenario], options: PlanOptions, setup: SessionSetup) -> Session:
    """Plan, run, diagnose and report ``scenarios``; Ctrl-C ends it early with ``interrupted`` set."""
    check_unique_names(scenarios)  # two scenarios' runs must never share an evidence folder
    try:
        child_path_dir()  # in the cache folder: every run's start needs it, so a read-only cache is said once
    except OSError as exc:
        raise BuildCacheError(unwritable_cache(cache_dir(), exc)) from None
    report_dir = setup.report_dir.resolve() if setup.report_dir is not None else None  # children run elsewhere
    runs_dir = setup.runs_dir or (report_dir / "runs" if report_dir is not None else None)
    live = setup.terminal and not setup.quiet and any(s.is_plain for s in scenarios)
    sinks = sinks_for(terminal=setup.terminal, verbose=setup.verbose, report_dir=report_dir, quiet=setup.quiet,
                      live=live, color=setup.color, alone=setup.alone)
    terminal = next((s for s in sinks if isinstance(s, TerminalSink)), None)
    hooks: tuple[CaptureHook, ...] = (capture_hang,) if setup.native else ()
    cluster = None
    jobs = setup.jobs
    if setup.scheduler is not None:
        from lifeguard.run.cluster import ClusterExecutor  # Dask: only for --scheduler

        cluster = ClusterExecutor(setup.scheduler, explain_failure, hooks)
        # Two runs in flight per worker thread of the cluster: the next one waits on its worker while the current
        # one runs, so a task's round trip through the scheduler is not paid between two runs.
        jobs = 2 * cluster.slots
    engine = Engine(setup.interpreter, jobs=jobs, sinks=sinks, capture_hooks=hooks, explain=explain_failure,
                    runs_dir=runs_dir, live=TerminalEcho(prefix=setup.live_prefix) if live else None,
                    on_compile=terminal.compiling if terminal is not None else None,
                    keep_all_runs=setup.keep_all_runs, cluster=cluster)
    try:
        return engine.run(list(scenarios), options)
    finally:
        if cluster is not None:
            cluster.close()


def exit_code(session: Session, *, alone: bool = False) -> int:
    """0 every verdict expected, 1 some unexpected, 3 lifeguard failed a run (outcome ``error``: whatever
    the verdicts say, they rest on a run lifeguard could not judge), 130 interrupted.

    ``alone`` (one plain target run once without --expect, as a CI step wraps pytest): the program's own exit
    code when it only failed by it (pytest's 1 for failed tests), EXIT_LIFETIME when lifeguard found a lifetime
    problem (a crash, a hang, corruption, processes left behind), so that a script can tell the two apart."""
    if session.interrupted:
        return EXIT_INTERRUPTED
    if any(result.outcome is Outcome.ERROR for result in session.results):
        return EXIT_INTERNAL
    if session.all_expected:
        return EXIT_OK
    if alone and session.finished == 1 and len(session.scenarios) == 1 and len(session.results) == 1:
        result = session.results[0]
        return result.exit_code if exited_on_its_own(result) and result.exit_code else EXIT_LIFETIME
    return EXIT_UNEXPECTED
