"""The terminal sink: progress while runs finish, then one line per series and the evidence of what was unexpected."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from lifeguard import __version__
from lifeguard.model.outcomes import Outcome, Verdict
from lifeguard.model.result import RunResult, Session
from lifeguard.report.text import evidence_text, series_runs, summary_line

PLAIN_PROGRESS_INTERVAL = 10.0  # seconds between progress lines when not on a terminal



class TerminalSink:
    """Progress while running, then one line per scenario x variant and the evidence of failures."""

    def __init__(self, stream: TextIO | None = None, verbose: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.verbose = verbose
        self.done = 0
        self.total: int | None = 0
        self.lock = threading.Lock()
        self.tty = self.stream.isatty()

    def start(self, session: Session, total_runs: int | None) -> None:
        self.total = total_runs
        self.began = time.monotonic()
        self.last_line = self.began
        self.failures = 0
        interp = session.interpreter
        planned = f"{total_runs} runs" if total_runs is not None else "runs until failure or time"
        print(f"lifeguard {__version__}: {planned} of {len(session.scenarios)} scenario(s) "
              f"under Python {interp.version_text} ({interp.executable}), seed {session.base_seed}",
              file=self.stream, flush=True)

    def result(self, result: RunResult) -> None:
        with self.lock:
            self.done += 1
            if result.outcome is not Outcome.PASSED:
                self.failures += 1
            if self.verbose:
                print(f"  {result}", file=self.stream, flush=True)
                return
            now = time.monotonic()
            elapsed = max(now - self.began, 1e-6)
            of = f"/{self.total}" if self.total else ""
            progress = (f"runs {self.done}{of}  failed {self.failures}  {self.done / elapsed:.1f} runs/s"
                        f"  {elapsed:.0f}s")
            if self.tty:
                bar = ""
                if self.total:
                    filled = int(30 * self.done / self.total)
                    bar = "[" + "#" * filled + "." * (30 - filled) + "] "
                print(f"\r  {bar}{progress}", end="", file=self.stream, flush=True)
            elif now - self.last_line >= PLAIN_PROGRESS_INTERVAL:
                # Not a terminal (CI logs): a plain line now and then, no carriage returns.
                self.last_line = now
                print(f"  {progress}", file=self.stream, flush=True)

    def finish(self, session: Session) -> None:
        out = self.stream
        if self.tty and not self.verbose:
            print(file=out)
        for summary in session.summaries:
            print(summary_line(summary), file=out)
            if summary.verdict is Verdict.EXPECTED:
                # A failure that was expected (a buggy variant, a reproduction): say what explains it.
                failed = next((r for r in series_runs(session, summary) if r.outcome is not Outcome.PASSED), None)
                for finding in failed.findings if failed is not None else ():
                    print(f"       finding {finding}", file=out)
        for summary in session.summaries:
            if summary.verdict is Verdict.EXPECTED or summary.first_unexpected is None:
                continue
            runs = series_runs(session, summary)
            print(f"\n=== {summary.scenario}[{summary.variant}] expected {summary.expected} ===", file=out)
            if runs:
                print(evidence_text(runs[summary.first_unexpected]), file=out)
        bad = sum(1 for s in session.summaries if s.verdict is Verdict.UNEXPECTED)
        state = "interrupted" if session.interrupted else ("all as expected" if not bad else f"{bad} unexpected")
        print(f"\n{len(session.results)} runs in {session.duration:.1f}s: {state}", file=out, flush=True)
