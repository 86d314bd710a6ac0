"""Shared text: the evidence of one run and the line of one series, as the terminal, JUnit and the
plugin show them."""

from __future__ import annotations

from lifeguard.model.outcomes import Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session
from lifeguard.model.run import StartMode

EVIDENCE_LINES = 25


NATIVE_LINES = 80  # of the rendered native stacks in the terminal; the whole text is in backtraces.txt


def evidence_text(result: RunResult, max_lines: int = EVIDENCE_LINES) -> str:
    """The readable evidence of one run: why, stderr tail, Python stacks, native stacks."""
    parts = [f"{result}: {result.reason}".rstrip(": ")]
    if result.mode is not StartMode.FRESH:
        parts.append(f"mode: {result.mode}")
    if result.replay:
        parts.append(f"replay: {result.replay}")
    if result.corruption:
        for item in result.corruption[:3]:
            parts.append(f"corruption (pid {item.pid}): {item.message}")
            if item.data_hex:
                parts.append(f"  bytes: {item.data_hex[:128]}")
    if result.leftover_processes:
        parts.append("leftover processes: " + ", ".join(
            f"{p.pid} ({p.comm})" for p in result.leftover_processes))
    if result.stderr_tail.strip():
        lines = result.stderr_tail.rstrip().splitlines()[-max_lines:]
        parts.append("--- stderr (tail) ---\n" + "\n".join(lines))
    for pid, dump in result.python_stacks.items():
        lines = dump.rstrip().splitlines()[-max_lines * 2:]
        parts.append(f"--- Python stacks of pid {pid} (faulthandler) ---\n" + "\n".join(lines))
    if result.backtraces:
        lines = "\n".join(p.text for p in result.backtraces).rstrip().splitlines()
        shown = lines[:NATIVE_LINES]
        if len(lines) > NATIVE_LINES:
            where = result.evidence.get("backtraces", "report.json")
            shown.append(f"[... {len(lines) - NATIVE_LINES} more lines in {where}]")
        parts.append("--- native backtraces ---\n" + "\n".join(shown))
    for finding in result.findings:
        parts.append(f"finding {finding}")
        if finding.hint:
            parts.append(f"  fix: {finding.hint}")
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
