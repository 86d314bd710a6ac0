"""One session builder for every front end: ``lifeguard run``, ``lifeguard probe`` and the pytest plugin.

It wires what the engine gets handed (sinks, native capture hooks, diagnosis), so no front end builds
an engine by hand, and turns the session into the exit code DESIGN.md promises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeguard.capture.native import native_capture_hooks
from lifeguard.diagnose.explain import explain
from lifeguard.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED
from lifeguard.interpreter import Interpreter
from lifeguard.model.result import Session
from lifeguard.model.scenario import Scenario
from lifeguard.plan.scheduler import PlanOptions
from lifeguard.report.sinks import sinks_for
from lifeguard.run.engine import Engine


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


def run_session(scenarios: Sequence[Scenario], options: PlanOptions, setup: SessionSetup) -> Session:
    """Plan, run, diagnose and report ``scenarios``; Ctrl-C ends it early with ``interrupted`` set."""
    report_dir = setup.report_dir.resolve() if setup.report_dir is not None else None  # children run elsewhere
    runs_dir = setup.runs_dir or (report_dir / "runs" if report_dir is not None else None)
    engine = Engine(setup.interpreter, jobs=setup.jobs,
                    sinks=sinks_for(terminal=setup.terminal, verbose=setup.verbose, report_dir=report_dir),
                    capture_hooks=native_capture_hooks() if setup.native else (), explain=explain,
                    runs_dir=runs_dir)
    return engine.run(list(scenarios), options)


def exit_code(session: Session) -> int:
    """0 every verdict expected, 1 some unexpected, 130 interrupted."""
    if session.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if session.all_expected else EXIT_UNEXPECTED
