"""Shared text: the evidence of one run and the line of one series, as the terminal, JUnit and the
plugin show them."""

from __future__ import annotations

from lifeguard.model.outcomes import Verdict
from lifeguard.model.result import RunResult, SeriesSummary, counts_text, series_label
from lifeguard.model.run import StartMode

EVIDENCE_LINES = 25


def findings_text(result: RunResult) -> list[str]:
    """Each finding with its fix and what it rests on: the first thing a reader of a failure sees."""
    lines = []
    for finding in result.findings:
        lines.append(f"finding {finding}")
        if finding.hint:
            lines.append(f"  fix: {finding.hint}")
        for item in finding.evidence[:4]:
            lines.append(f"  seen: {item}")
    return lines


def _python_dump(dump: str, max_lines: int) -> str:
    """A faulthandler dump without lifeguard's bootstrap and runpy lines (there in every run)."""
    from lifeguard.model.stacks import is_harness_file
    kept = [line for line in dump.rstrip().splitlines()
            if not is_harness_file(line) and 'File "<string>", line 1 in <module>' not in line]
    return "\n".join(kept[-max_lines:])


def evidence_text(result: RunResult, max_lines: int = EVIDENCE_LINES, *, tails: bool = True) -> str:
    """The readable evidence of one run, the culprit first: why, the findings, the stacks (the threads
    the findings name in full, the rest one line each), stderr tail (unless ``tails`` is false: it was
    shown live), Python dumps native stacks lack."""
    parts = [f"{result}: {result.reason}".rstrip(": ")]
    parts.extend(findings_text(result))
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
    if result.backtraces:
        from lifeguard.diagnose.view import stacks_view  # the rule tables: only for a run that failed

        where = result.evidence.get("backtraces", "report.json")
        parts.append(f"--- stacks, culprit first (every frame of every thread: {where}) ---\n"
                     + stacks_view(result))
    with_python = {str(p.pid) for p in result.backtraces if any(t.python_frames for t in p.threads)}
    for pid, dump in result.python_stacks.items():
        if pid not in with_python:  # already interleaved with the native frames above
            parts.append(f"--- Python stacks of pid {pid} (faulthandler) ---\n" + _python_dump(dump, max_lines * 2))
    if tails and result.stderr_tail.strip():
        lines = result.stderr_tail.rstrip().splitlines()[-max_lines:]
        parts.append("--- stderr (tail) ---\n" + "\n".join(lines))
    for note in result.notes:
        parts.append(f"note: {note}")
    parts.append(f"evidence: {result.run_dir}")
    return "\n".join(parts)


def summary_line(summary: SeriesSummary) -> str:
    counts = counts_text(summary.counts)
    mark = "ok  " if summary.verdict is Verdict.EXPECTED else "FAIL"
    runs = f"{summary.runs} run" if summary.runs == 1 else f"{summary.runs} runs"
    line = (f"{mark} {series_label(summary.scenario, summary.variant)}  {runs}: {counts}"
            f"  (expected {summary.expected}) -> {summary.verdict.value}")
    if summary.stats is not None and summary.runs > 1:
        line += f"\n       {summary.stats.bound_text()}"
        if summary.stats.runs_to_first_failure and summary.stats.failures < summary.runs:
            line += f"; first failure at run {summary.stats.runs_to_first_failure}"
        line += (f"; run time p50 {summary.stats.duration_p50:.3f}s p90 {summary.stats.duration_p90:.3f}s"
                 f" max {summary.stats.duration_max:.3f}s")
        if summary.stats.failures == 0 and summary.threads_at_exit:
            line += (f"\n       {summary.threads_at_exit} of these runs still had other threads at exit: a race "
                     "of theirs with the exit can be rarer under lifeguard than alone; --perturb exit-starve "
                     "makes it show")
    if summary.modes and summary.modes != ("fresh",):
        line += f"\n       mode: {', '.join(summary.modes)}"
    return line

