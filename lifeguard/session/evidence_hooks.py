"""What a front end hands the supervision of a run for its evidence: native capture at a hang and the
explanation of a failure.

Both import their machinery (capture back ends, the diagnosis) when a run first needs it, and this module
imports nothing heavy: the pytest plugin's forked tests use them without loading the engine, so a pytest
process that guards a suite carries no module it does not use into every forked test's copy of it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.run.launch import core_files
from lifeguard.run.supervise import CaptureHook, HangContext

if TYPE_CHECKING:
    from lifeguard.model.stacks import ProcessStacks


@functools.cache
def _hang_hooks() -> tuple[CaptureHook, ...]:
    from lifeguard.capture.native import native_capture_hooks

    return native_capture_hooks()


def capture_hang(context: HangContext) -> list[ProcessStacks]:
    """The native capture hooks, looked up (which back ends are installed) at the first hang."""
    stacks: list[ProcessStacks] = []
    for hook in _hang_hooks():
        stacks.extend(hook(context))
    return stacks


def explain_failure(spec: RunSpec, result: RunResult) -> RunResult:
    """A failed run's findings (the diagnosis); a passed run as it is."""
    # A passed run without a core file in its folder has nothing to explain, and must not pay for importing
    # the diagnosis (~60 ms, most of what lifeguard adds to a short program).
    if result.outcome is Outcome.PASSED and not (spec.cores and core_files(spec.run_dir)):
        return result
    from lifeguard.diagnose.explain import explain

    return explain(spec, result)
