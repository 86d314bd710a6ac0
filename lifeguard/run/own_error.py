"""A run that lifeguard itself failed: recorded with outcome ``error``, never lost.

An exception in a worker (supervising a run, or explaining it afterwards) is lifeguard's own fault for
that run, not the scenario's: the run is recorded with what was seen of it and the traceback, every sink
shows it, and the session exits 3 (lifeguard.session.setup.exit_code).
"""

from __future__ import annotations

import errno
import traceback
from dataclasses import replace

from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec

# The traceback kept in the run's notes: its last lines (where it failed) are what a bug report needs.
TRACEBACK_LINES = 40
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> bool:
    """Did ``exc`` come of a full disk (or quota)?"""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def error_result(spec: RunSpec, exc: BaseException, *, during: str, seen: RunResult | None = None) -> RunResult:
    """The run ``spec`` as lifeguard's own error ``exc`` left it, ``during`` "supervising" or "explaining";
    ``seen``: what supervision had recorded before explaining failed (its signal, exit code, tails stay)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    trace = "".join(lines).rstrip().splitlines()[-TRACEBACK_LINES:]
    problem = f"{type(exc).__name__}: {exc}"
    if during == "explaining" and seen is not None:
        what = f"{seen.outcome.value}@{seen.phase.value}" if seen.phase else seen.outcome.value
        reason = f"lifeguard failed explaining a {what} run: {problem}"
    else:
        reason = f"lifeguard failed {during} this run: {problem}"
    if isinstance(exc, OSError) and not spec.run_dir.is_dir():
        reason += " (the run's folder is gone: did the run delete it?)"
    note = "lifeguard's own error (a bug, or its environment: please report it with this traceback):\n" \
        + "\n".join(trace)
    if seen is None:
        seen = RunResult(scenario=spec.scenario, variant=spec.variant, index=spec.index, outcome=Outcome.ERROR,
                         phase=None, expected=spec.expected, signal=None, exit_code=None, duration=0.0,
                         python=spec.interpreter.version_text, run_dir=str(spec.run_dir), seed=spec.seed,
                         perturbations=tuple(spec.perturbations), mode=spec.mode, replay=spec.replay)
    # No phase: the run's phase is its own outcome's (kept in the reason), and `error` is lifeguard's.
    return replace(seen, outcome=Outcome.ERROR, phase=None, reason=reason, notes=(*seen.notes, note))
