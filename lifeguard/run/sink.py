"""Where a session's finished runs go: the Sink protocol every report implements, and the one way a run is
counted into its series and handed to the sinks (the engine, the pytest plugin's session record and a merge
alike). Light: the pytest plugin's forked tests count their runs here without loading the engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lifeguard.child.protocol import ATEXIT_DONE
from lifeguard.model.result import RunResult, SeriesSummary, Session
from lifeguard.model.scenario import Scenario
from lifeguard.model.tally import SeriesTally
from lifeguard.plan.perturbations import EXIT_STARVE


class Sink(Protocol):
    """Receives results as they come; every report reads the same objects. A sink that shows series may
    also have ``series_done(summary: SeriesSummary)``, called once a series has had its last run."""

    def start(self, session: Session, total_runs: int | None) -> None: ...

    def result(self, result: RunResult) -> None: ...

    def finish(self, session: Session) -> None: ...


# Runs a session keeps in memory with their evidence (Session.results): the first RUNS_KEPT that are evidence
# (did not pass, or were unexpected). A later one is streamed to the sinks like any run (results.jsonl, and
# report.json, which is written from it, list every run in full; its folder keeps its files) and counted in its
# series' summary, but not held: a --duration session of a buggy variant would otherwise hold every crash's
# tails and events until it ends. Each series' first failure and first unexpected run are held by its tally
# whatever this says, for the terminal, junit.xml and report.html.
RUNS_KEPT = 100


def tallies_for(session: Session, series: list[tuple[Scenario, str, int]]) -> dict[tuple[str, str], SeriesTally]:
    """One tally a series, in the plan's order (the summaries' order)."""
    version = session.interpreter.short_version
    return {(item.name, variant): SeriesTally(item, variant, item.expectation(variant, version))
            for item, variant, _ in series}


def _threads_at_exit(result: RunResult) -> bool:
    """Other threads were alive as the run began to finalize, and exit-starve did not hold them back: a race of
    theirs with the exit may be rarer under lifeguard than alone (a clean series says so)."""
    if EXIT_STARVE in result.perturbations:
        return False
    return any(e.name == ATEXIT_DONE and isinstance(e.get("threads"), int) and e.get("threads") > 0
               for e in result.events)


def count_run(session: Session, tally: SeriesTally, result: RunResult, sinks: Sequence[Sink], *,
              keep_all: bool = False) -> None:
    """A finished run into its series' tally and the session (held when it is evidence, up to RUNS_KEPT, or
    always with ``keep_all``), and to every sink: the engine, the pytest plugin's session and a merge alike."""
    tally.add(result, threads_at_exit=_threads_at_exit(result))
    session.finished += 1
    if keep_all or (tally.is_evidence(result) and len(session.results) < RUNS_KEPT):
        session.results.append(result)
    for sink in sinks:
        sink.result(result)


def series_finished(summary: SeriesSummary, sinks: Sequence[Sink]) -> None:
    """A series had its last run: the sinks that show series (an optional ``series_done``) are told."""
    for sink in sinks:
        series_done = getattr(sink, "series_done", None)
        if series_done is not None:
            series_done(summary)
