"""The description of one run: what the supervisor needs to start and judge it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lifeguard.interpreter import Interpreter


@dataclass(frozen=True)
class RunSpec:
    """Everything the supervisor needs to start one run."""

    scenario: str
    variant: str
    index: int
    kind: str  # "function", "script" or "code"
    path: str
    function: str
    code: str | None
    interpreter: Interpreter
    timeout: float
    run_dir: Path
    expected: str
    fixture: str | None = None
    fixture_dir: str | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    python_flags: tuple[str, ...] = ()
    # Native evidence for this run: a crashing child dumps core and gdb reads it,
    # gdb captures a hang (off after a series' first few failures, or with --no-native).
    cores: bool = True
    keep_cores: bool = False
    # How a crash's native stacks are read: "core" (the kernel's core file, falling back
    # to replay when cores are piped elsewhere) or "replay" (rerun the run under gdb).
    backtrace: str = "core"
    seed: int = 0
    perturbations: tuple[str, ...] = ()
    mode: str = "fresh"  # "fresh", "fork-server/fast" or "fork-server/full"
    replay: str = ""  # the command that reruns this run (same seed and perturbations)


# The ways a run can start, as `--mode` names them.
MODES = ("auto", "fresh", "fork-server")
