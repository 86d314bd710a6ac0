"""The terminal sink: progress while runs finish, then one line per series and the evidence of what was unexpected.

Everything that comes from a child (a reason, a stderr tail, a library message) is made visible first
(report.escape.for_terminal): a child's escape sequences never act on the terminal. The stream is a
report.stream.SafeOutput: a reader that goes away (``| head -1``) silences the terminal, not the session.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from lifeguard import __version__
from lifeguard.errors import EXIT_LIFETIME
from lifeguard.model.outcomes import Expectation, Outcome, Phase, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session, series_label
from lifeguard.report.escape import for_terminal
from lifeguard.report.stream import SafeOutput
from lifeguard.report.text import evidence_text, summary_line

PLAIN_PROGRESS_INTERVAL = 10.0  # seconds between progress lines when not on a terminal
TICK = 1.0  # seconds between redraws of a terminal's progress line while no run ends
MAX_ERRORS_SHOWN = 10  # runs lifeguard itself failed, listed at the end one line each
COLOR_CHOICES = ("auto", "yes", "no")
COLOR_HELP = "colour the verdicts: auto (as pytest: PY_COLORS, NO_COLOR, FORCE_COLOR, else a terminal), yes, no"
_GREEN, _RED, _YELLOW, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


def use_color(choice: str, stream: TextIO | SafeOutput, environ: dict[str, str] | None = None) -> bool:
    """``--color auto|yes|no``. auto decides as pytest does: PY_COLORS=1/0 first, then a non-empty NO_COLOR
    (no-color.org: an empty one does not count) turns colour off, a non-empty FORCE_COLOR on (a CI log that
    renders colour), else a terminal that is not TERM=dumb."""
    import os

    env = os.environ if environ is None else environ
    if choice in ("yes", "no"):
        return choice == "yes"
    if env.get("PY_COLORS") in ("0", "1"):
        return env["PY_COLORS"] == "1"
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return stream.isatty() and env.get("TERM") != "dumb"


def plural(count: int, word: str = "run") -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _unexpected(result: RunResult) -> bool:
    """Could this run not belong to a series that meets its expectation? (an expected crash is not)."""
    try:
        return not Expectation.parse(result.expected).accepts(result.outcome, result.phase)
    except ValueError:
        return result.outcome is not Outcome.PASSED


def _key(result: RunResult) -> tuple[str, str, int]:
    return (result.scenario, result.variant, result.index)


def exited_on_its_own(result: RunResult) -> bool:
    """A run that failed only by its own non-zero exit code: no signal, hang, corruption, leftover process,
    forked child that ended badly (for a wrapped command such as pytest, its own verdict, not a lifetime
    problem)."""
    return (result.outcome is Outcome.FAILED and result.signal is None and not result.leftover_processes
            and result.exit_code not in (None, 0) and result.phase is not Phase.FORK_CHILD)


class TerminalSink:
    """Progress while running, then one line per scenario x variant and the evidence of failures.

    ``quiet``: the results only (no header, no progress). ``live``: plain targets' output is being shown
    as it comes (report.live), so no progress bar is drawn across it and their stdout/stderr tails are not
    shown again. ``alone``: one plain target run once without --expect, whose own failing exit code is the
    program's verdict, not an unexpected one (session.setup.exit_code).
    """

    def __init__(self, stream: TextIO | None = None, verbose: bool = False, *, quiet: bool = False,
                 live: bool = False, color: str = "auto", alone: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.out = SafeOutput(self.stream)
        self.color = use_color(color, self.out)
        self.verbose = verbose
        self.quiet = quiet
        self.live = live
        self.alone = alone  # one plain target run once: its own exit code is lifeguard's (session.setup)
        self.done = 0
        self.shown: set[tuple[str, str]] = set()  # series whose line is out (series_done)
        self.total: int | None = 0
        self.lock = threading.Lock()
        self.tty = self.out.isatty()
        self._stop = threading.Event()  # the session has ended: no more progress lines
        self._ticker: threading.Thread | None = None

    def print(self, text: str = "", end: str = "\n") -> None:
        self.out.write(for_terminal(text) + end)

    def paint(self, text: str, colour: str) -> str:
        """``text`` in ``colour`` on a colour terminal (after for_terminal(): lifeguard's own escapes only)."""
        return f"{colour}{text}{_RESET}" if self.color else text

    def print_marked(self, line: str) -> None:
        """A series line, its leading ok / FAIL / skip mark coloured."""
        text = for_terminal(line)
        for mark, colour in (("ok ", _GREEN), ("FAIL", _RED), ("skip", _YELLOW), ("exit", _YELLOW)):
            if text.startswith(mark):
                text = self.paint(mark, colour) + text[len(mark):]
                break
        self.out.write(text + "\n")

    def compiling(self, fixture: str, variant: str) -> None:
        """Before a fixture build that is not cached: seconds of compiler time, said while they pass."""
        if not self.quiet:
            self.print(f"compiling fixture {fixture} ({variant})...")

    def start(self, session: Session, total_runs: int | None) -> None:
        self.total = total_runs
        self.began = time.monotonic()
        self.last_line = self.began
        self.failures = 0
        if self.quiet:
            return
        if self._drawn:
            self._ticker = threading.Thread(target=self._tick, name="lifeguard-progress", daemon=True)
            self._ticker.start()
        interp = session.interpreter
        planned = plural(total_runs) if total_runs is not None else "runs until failure or time"
        part = f" (shard {session.shard} of the plan)" if session.shard else ""
        if session.merged:
            part = f" (merged from {len(session.merged)} shards)"
        self.print(f"lifeguard {__version__}: {planned} of {len(session.scenarios)} scenario(s){part} "
                   f"under Python {interp.version_text} ({interp.executable}), seed {session.base_seed}")

    def result(self, result: RunResult) -> None:
        with self.lock:
            self.done += 1
            if _unexpected(result):
                self.failures += 1
            if self.verbose:
                self.print(f"  {result}")
                return
            if self.quiet:
                return
            now = time.monotonic()
            if self._drawn:
                self._draw(now)
            elif not self.tty and now - self.last_line >= PLAIN_PROGRESS_INTERVAL:
                # Not a terminal (CI logs): a plain line now and then, no carriage returns.
                self.last_line = now
                self.print(f"  {self._progress(now)}")

    @property
    def _drawn(self) -> bool:
        """Is there a progress line to draw over (a terminal, and nothing else writing to it line by line)?"""
        return self.tty and not self.live and not self.quiet and not self.verbose

    def _progress(self, now: float) -> str:
        elapsed = max(now - self.began, 1e-6)
        of = f"/{self.total}" if self.total else ""
        rate = self.done / elapsed
        progress = f"runs {self.done}{of}  unexpected {self.failures}  {rate:.1f} runs/s  {elapsed:.0f}s"
        if self.total and 0 < self.done < self.total:
            progress += f"  ETA {(self.total - self.done) / rate:.0f}s"
        return progress

    def _draw(self, now: float) -> None:
        """The progress line, written over the last one (erased to its end: a shorter line leaves nothing)."""
        bar = ""
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = "[" + "#" * filled + "." * (30 - filled) + "] "
        self.out.write("\r\x1b[K")
        self.print(f"  {bar}{self._progress(now)}", end="")

    def _tick(self) -> None:
        """Redraw the progress line every TICK seconds: it moves (elapsed time) through a run that hangs."""
        while not self._stop.wait(TICK):
            with self.lock:
                if not self._stop.is_set():
                    self._draw(time.monotonic())

    def series_done(self, summary: SeriesSummary) -> None:
        """A series had its last run: its line now, not at the end (a long session shows each as it ends)."""
        with self.lock:
            if self.quiet or (summary.scenario, summary.variant) in self.shown:
                return
            if self.tty and not self.verbose and not self.live:
                self.out.write("\r\x1b[K")  # over the progress line, which the next run writes again
            self._series_lines(summary)

    def _own_exit(self, summary: SeriesSummary) -> RunResult | None:
        """The run of a program run alone that failed only by its own exit code (pytest's failed tests)."""
        result = summary.first_unexpected
        return result if self.alone and result is not None and exited_on_its_own(result) else None

    def _series_lines(self, summary: SeriesSummary) -> None:
        self.shown.add((summary.scenario, summary.variant))
        own = self._own_exit(summary)
        if own is not None:
            # The program's own verdict, which its output said: lifeguard exits with its code.
            self.print_marked(f"exit {series_label(summary.scenario, summary.variant)}  exited with code "
                              f"{own.exit_code} on its own: no crash, hang, corruption or process left behind")
            if not self.live and own.stderr_tail.strip():
                self.print("--- stderr (tail) ---\n" + "\n".join(own.stderr_tail.rstrip().splitlines()[-10:]))
            self.print(f"       evidence: {own.run_dir}")
            return
        self.print_marked(summary_line(summary))
        if summary.verdict is Verdict.EXPECTED:
            # A failure that was expected (a buggy variant, a reproduction): say what explains it.
            failed = summary.first_failure
            for finding in failed.findings if failed is not None else ():
                self.print(f"       finding {finding}")

    def finish(self, session: Session) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=TICK + 1)
        if self._drawn:
            self.print()
        plain = {s.name for s in session.scenarios if s.is_plain}
        for summary in session.summaries:
            if (summary.scenario, summary.variant) in self.shown:
                continue
            if summary.runs == 0 and (session.stopped or session.failure):
                why = "stopped at the first unexpected verdict (-x)" if session.stopped else \
                    "the session stopped early (below)"
                self.print_marked(f"skip {series_label(summary.scenario, summary.variant)}  not run: {why}")
                continue
            self._series_lines(summary)
        own_exits = [(summary, self._own_exit(summary)) for summary in session.summaries]
        own = next((run for _, run in own_exits if run is not None), None)
        for summary, own_exit in own_exits:
            if summary.verdict is Verdict.EXPECTED or summary.first_unexpected is None or not summary.runs:
                continue
            if own_exit is not None:
                continue  # said in its series line
            self.print(f"\n=== {series_label(summary.scenario, summary.variant)} expected {summary.expected} ===")
            self.print(self._evidence(summary.first_unexpected, summary.scenario in plain))
        shown = {_key(s.first_unexpected) for s in session.summaries
                 if s.verdict is Verdict.UNEXPECTED and s.runs and s.first_unexpected is not None}
        self._own_errors(session, shown)
        bad = sum(1 for s in session.summaries if s.verdict is Verdict.UNEXPECTED and s.runs)
        state = "interrupted" if session.interrupted else ("all as expected" if not bad else f"{bad} unexpected")
        if own is not None and not session.interrupted:
            state = f"the program's own exit code {own.exit_code}, nothing lifetime-related"
        elif self.alone and bad and not session.interrupted:
            state += f": a lifetime problem (exit code {EXIT_LIFETIME})"
        errors = sum(s.counts.get(Outcome.ERROR.value, 0) for s in session.summaries)
        if errors:
            state += f", {plural(errors)} failed by lifeguard's own error"
        if session.stopped:
            state += ", stopped at the first (-x)"
        if session.failure:
            state += f", stopped early: {session.failure}"
        good = not bad and not session.interrupted and not session.failure
        self.print()
        colour = _GREEN if good else (_YELLOW if own is not None else _RED)
        self.out.write(f"{plural(session.finished)} in {session.duration:.1f}s: "
                       + self.paint(for_terminal(state), colour) + "\n")

    def _own_errors(self, session: Session, shown: set[tuple[str, str, int]]) -> None:
        """Every run lifeguard itself failed that the session kept, one line each (the first one's traceback
        too, unless its evidence was shown above): what a bug report needs."""
        count = sum(s.counts.get(Outcome.ERROR.value, 0) for s in session.summaries)
        errors = [r for r in session.results if r.outcome is Outcome.ERROR]
        if not count:
            return
        self.print(f"\n=== lifeguard's own errors: {plural(count)} (exit code 3) ===")
        for result in errors[:MAX_ERRORS_SHOWN]:
            self.print(f"{result}: {result.reason}")
        if count > min(len(errors), MAX_ERRORS_SHOWN):
            self.print(f"... and {count - min(len(errors), MAX_ERRORS_SHOWN)} more (results.jsonl, report.json)")
        if errors and _key(errors[0]) not in shown:
            for note in errors[0].notes[-1:]:
                self.print(note)

    def _evidence(self, result: RunResult, plain: bool) -> str:
        if plain and exited_on_its_own(result):
            # A wrapped program's own failure (pytest's failed tests) in a session of several runs: its output
            # said why; lifeguard saw nothing lifetime-related.
            lines = [f"{result}: {result.reason}",
                     f"exited with code {result.exit_code} on its own: no crash, hang, corruption or process "
                     "left behind"]
            if not self.live and result.stderr_tail.strip():
                lines.append("--- stderr (tail) ---\n" + "\n".join(result.stderr_tail.rstrip().splitlines()[-10:]))
            return "\n".join([*lines, f"evidence: {result.run_dir}"])
        return evidence_text(result, tails=not (plain and self.live))

