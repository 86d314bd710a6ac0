"""Sinks: the terminal, results.jsonl (streamed), report.json and junit.xml.

Every sink reads the same RunResult / SeriesSummary objects; nothing is computed twice.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, TextIO

from lifeguard import __version__
from lifeguard.engine import SeriesSummary, Session
from lifeguard.outcomes import Outcome, Verdict
from lifeguard.results import RunResult

SCHEMA_VERSION = 1
PLAIN_PROGRESS_INTERVAL = 10.0  # seconds between progress lines when not on a terminal
EVIDENCE_LINES = 25
NATIVE_LINES = 80  # of the rendered native stacks in the terminal; the whole text is in backtraces.txt


def evidence_text(result: RunResult, max_lines: int = EVIDENCE_LINES) -> str:
    """The readable evidence of one run: why, stderr tail, Python stacks, native stacks."""
    parts = [f"{result}: {result.reason}".rstrip(": ")]
    if result.mode != "fresh":
        parts.append(f"mode: {result.mode}")
    if result.replay:
        parts.append(f"replay: {result.replay}")
    if result.corruption:
        for item in result.corruption[:3]:
            parts.append(f"corruption (pid {item.get('pid')}): {item.get('message', '')}")
            if item.get("data_hex"):
                parts.append(f"  bytes: {item['data_hex'][:128]}")
    if result.leftover_processes:
        parts.append("leftover processes: " + ", ".join(
            f"{p['pid']} ({p['comm']})" for p in result.leftover_processes))
    if result.stderr_tail.strip():
        lines = result.stderr_tail.rstrip().splitlines()[-max_lines:]
        parts.append("--- stderr (tail) ---\n" + "\n".join(lines))
    for pid, dump in result.python_stacks.items():
        lines = dump.rstrip().splitlines()[-max_lines * 2:]
        parts.append(f"--- Python stacks of pid {pid} (faulthandler) ---\n" + "\n".join(lines))
    rendered = [str(b["text"]) for b in result.backtraces if b.get("text")]
    if rendered:
        lines = "\n".join(rendered).rstrip().splitlines()
        shown = lines[:NATIVE_LINES]
        if len(lines) > NATIVE_LINES:
            where = result.evidence.get("backtraces", "report.json")
            shown.append(f"[... {len(lines) - NATIVE_LINES} more lines in {where}]")
        parts.append("--- native backtraces ---\n" + "\n".join(shown))
    for finding in result.findings:
        parts.append(f"finding [{finding.get('kind')}]: {finding.get('summary')}")
        if finding.get("hint"):
            parts.append(f"  fix: {finding['hint']}")
    for note in result.notes:
        parts.append(f"note: {note}")
    parts.append(f"evidence: {result.run_dir}")
    return "\n".join(parts)


def summary_line(summary: SeriesSummary) -> str:
    counts = ", ".join(f"{n} {o}" for o, n in summary.counts.items()) or "no runs"
    mark = "ok  " if summary.verdict is Verdict.EXPECTED else "FAIL"
    line = (f"{mark} {summary.scenario}[{summary.variant}]  {summary.runs} runs: {counts}"
            f"  (expected {summary.expected}) -> {summary.verdict.value}")
    if summary.stats is not None and summary.runs > 1:
        line += f"\n       {summary.stats.bound_text()}"
        if summary.stats.runs_to_first_failure and summary.stats.failures < summary.runs:
            line += f"; first failure at run {summary.stats.runs_to_first_failure}"
        line += (f"; run time p50 {summary.stats.duration_p50:.3f}s p90 {summary.stats.duration_p90:.3f}s"
                 f" max {summary.stats.duration_max:.3f}s")
    if summary.modes and summary.modes != ("fresh",):
        line += f"\n       mode: {', '.join(summary.modes)}"
    return line


def series_runs(session: Session, summary: SeriesSummary) -> list[RunResult]:
    """The runs of one scenario x variant, in run order."""
    return sorted((r for r in session.results if r.scenario == summary.scenario and r.variant == summary.variant),
                  key=lambda r: r.index)


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


class JsonlSink:
    """results.jsonl: one line per finished run, flushed at once, so a killed harness loses nothing."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in finish)
        self.lock = threading.Lock()

    def start(self, session: Session, total_runs: int | None) -> None:
        pass

    def result(self, result: RunResult) -> None:
        line = json.dumps(result.to_dict(), default=str)
        with self.lock:
            self.file.write(line + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())

    def finish(self, session: Session) -> None:
        self.file.close()


def report_dict(session: Session) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "lifeguard_version": __version__,
        "python": session.interpreter.to_dict(),
        "base_seed": session.base_seed,
        "started": session.started,
        "duration": round(session.duration, 3),
        "interrupted": session.interrupted,
        "all_expected": session.all_expected,
        "summaries": [s.to_dict() for s in session.summaries],
        "runs": [r.to_dict() for r in sorted(session.results, key=lambda r: (r.scenario, r.variant, r.index))],
    }


class ReportDirSink:
    """--report DIR: results.jsonl as runs finish; report.json, junit.xml and report.html at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.jsonl = JsonlSink(directory / "results.jsonl")

    def start(self, session: Session, total_runs: int | None) -> None:
        self.jsonl.start(session, total_runs)

    def result(self, result: RunResult) -> None:
        self.jsonl.result(result)

    def finish(self, session: Session) -> None:
        self.jsonl.finish(session)
        _atomic_write(self.directory / "report.json", json.dumps(report_dict(session), indent=1, default=str))
        _atomic_write(self.directory / "junit.xml", junit_xml(session))
        from lifeguard.html_report import render

        _atomic_write(self.directory / "report.html", render(session))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def junit_xml(session: Session) -> str:
    """One testcase per scenario x variant; a failure carries the evidence."""
    suite = ET.Element("testsuite", name="lifeguard", tests=str(len(session.summaries)),
                       failures=str(sum(s.verdict is Verdict.UNEXPECTED for s in session.summaries)),
                       time=f"{session.duration:.3f}")
    for summary in session.summaries:
        runs = series_runs(session, summary)
        case = ET.SubElement(suite, "testcase", classname=f"lifeguard.{summary.scenario}",
                             name=f"{summary.scenario}[{summary.variant}]",
                             time=f"{sum(r.duration for r in runs):.3f}")
        props = ET.SubElement(case, "properties")
        stats = summary.stats.to_dict() if summary.stats else {}
        for key, value in (("expected", summary.expected), ("runs", str(summary.runs)),
                           *((f"count.{o}", str(n)) for o, n in summary.counts.items()),
                           *((f"stats.{k}", str(v)) for k, v in stats.items() if v is not None)):
            ET.SubElement(props, "property", name=key, value=value)
        if summary.verdict is Verdict.UNEXPECTED:
            counts = ", ".join(f"{n} {o}" for o, n in summary.counts.items()) or "no runs"
            failure = ET.SubElement(case, "failure", message=f"expected {summary.expected}, got {counts}")
            if runs and summary.first_unexpected is not None:
                failure.text = evidence_text(runs[summary.first_unexpected])
        elif any(r.outcome is not Outcome.PASSED for r in runs):
            ET.SubElement(case, "system-out").text = evidence_text(
                next(r for r in runs if r.outcome is not Outcome.PASSED))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
