"""Findings: lifeguard's explanation of a failed run's evidence.

One rule per module in this package. A rule is a function ``check(evidence) ->
list[Finding]``; add a module, list it in RULES, and every sink shows its findings.
Specific rules run first; the generic rule speaks only when none of them did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lifeguard.diagnose.evidence import Evidence
from lifeguard.diagnose.messages import cause_quote
from lifeguard.diagnose.rules.atexit_order import check as atexit_order
from lifeguard.diagnose.rules.busy_loop import check as busy_loop
from lifeguard.diagnose.rules.daemon_thread import check as daemon_thread
from lifeguard.diagnose.rules.exit_waits_for_thread import check as exit_waits_for_thread
from lifeguard.diagnose.rules.fork_deadlock import check as fork_deadlock
from lifeguard.diagnose.rules.fork_runtime import check as fork_runtime
from lifeguard.diagnose.rules.gc_lock_deadlock import check as gc_lock_deadlock
from lifeguard.diagnose.rules.generic import check as generic
from lifeguard.diagnose.rules.gil_deadlock import check as gil_deadlock
from lifeguard.diagnose.rules.gil_held_blocking import check as gil_held_blocking
from lifeguard.diagnose.rules.lock_cycle import check as lock_cycle
from lifeguard.diagnose.rules.out_of_memory import check as out_of_memory
from lifeguard.diagnose.rules.refcount_underflow import check as refcount_underflow
from lifeguard.diagnose.rules.static_destructor import check as static_destructor
from lifeguard.diagnose.rules.stopped import check as stopped
from lifeguard.diagnose.rules.thread_at_exit import check as thread_at_exit
from lifeguard.diagnose.rules.unregistered_thread import check as unregistered_thread
from lifeguard.diagnose.rules.wrong_thread_destroy import check as wrong_thread_destroy
from lifeguard.diagnose.rules.wrong_thread_gc import check as wrong_thread_gc
from lifeguard.model.result import Finding, RunResult

Rule = Callable[[Evidence], list[Finding]]

# Specific rules first; each says nothing unless its own pattern is in the evidence.
RULES: tuple[Rule, ...] = (
    static_destructor, daemon_thread, refcount_underflow, wrong_thread_destroy, thread_at_exit, atexit_order,
    fork_runtime, fork_deadlock, gc_lock_deadlock, lock_cycle, gil_deadlock, gil_held_blocking, exit_waits_for_thread,
    stopped, busy_loop, wrong_thread_gc, unregistered_thread, out_of_memory,
)
FALLBACK_RULES: tuple[Rule, ...] = (generic,)


def diagnose(result: RunResult) -> list[Finding]:
    """Every finding the rules draw from one run's evidence (none for a passed run)."""
    evidence = Evidence.of(result)
    if not evidence.failed:
        return []
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(evidence))
    if not findings:
        for rule in FALLBACK_RULES:
            findings.extend(rule(evidence))
    return with_what_was_said(findings, evidence)


def with_what_was_said(findings: list[Finding], evidence: Evidence) -> list[Finding]:
    """The findings quoting what the program or a library printed on stderr before it went wrong (a fatal
    message, else a warning about fork, threads or shutdown), where no finding quotes it yet; a run that no
    rule explains gets it as a finding of its own (``said``)."""
    quote = cause_quote(evidence.stderr_messages)
    if quote is None:
        return findings
    text = quote.line.text.strip()
    if any(text in finding.summary or any(text in line for line in finding.evidence) for finding in findings):
        return findings
    seen = f"stderr line {quote.line.number}: {text}"
    if not findings:
        return [Finding(kind="said", summary=f"{quote.speaker} said: \"{text}\" ({quote.message.meaning})",
                        hint=quote.message.hint, evidence=(seen,))]
    first = findings[0]
    return [replace(first, summary=f"{first.summary}; {quote.speaker} said: \"{text}\"",
                    evidence=(*first.evidence, seen)), *findings[1:]]


__all__ = ["Evidence", "Finding", "RULES", "diagnose"]
