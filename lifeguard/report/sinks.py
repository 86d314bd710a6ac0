"""Which sinks a session writes to. Every sink reads the same RunResult / SeriesSummary objects;
nothing is computed twice. A new sink is one module with a class that has the three methods of
``Sink`` (lifeguard.run.sink) and one line here."""

from __future__ import annotations

from pathlib import Path

from lifeguard.run.sink import Sink


def sinks_for(*, terminal: bool, verbose: bool = False, report_dir: Path | None = None, quiet: bool = False,
              live: bool = False, color: str = "auto", alone: bool = False, fresh: bool = True) -> list[Sink]:
    """The terminal (unless ``terminal`` is false) and the report folder (when given: created, or refused in
    one line when it cannot be written)."""
    sinks: list[Sink] = []
    if terminal:
        from lifeguard.report.terminal import TerminalSink  # not for the pytest plugin, which has pytest's

        sinks.append(TerminalSink(verbose=verbose, quiet=quiet, live=live, color=color, alone=alone))
    if report_dir is not None:
        from lifeguard.report.files import ReportDirSink  # json, the html and junit writers: only when asked

        sinks.append(ReportDirSink(report_dir, fresh))
    return sinks
