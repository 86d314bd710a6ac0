"""Run results: one frozen record per run, read by every sink alike."""

from __future__ import annotations

import signal as signal_module
from dataclasses import asdict, dataclass, field
from typing import Any

from lifeguard.outcomes import Outcome, Phase


def signal_name(signum: int | None) -> str | None:
    if signum is None:
        return None
    try:
        return signal_module.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


@dataclass(frozen=True)
class RunResult:
    """What one supervised run ended in, and the evidence kept of it."""

    scenario: str
    variant: str
    index: int  # 0-based run number within its scenario x variant series
    outcome: Outcome
    phase: Phase | None
    expected: str  # the expectation this run was judged against
    signal: int | None
    exit_code: int | None
    duration: float
    python: str
    run_dir: str
    reason: str = ""  # one line: why this outcome
    fatal_error: str | None = None
    corruption: list[dict[str, Any]] = field(default_factory=list)
    leftover_processes: list[dict[str, Any]] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)  # name -> path
    stdout_tail: str = ""
    stderr_tail: str = ""
    python_stacks: dict[str, str] = field(default_factory=dict)  # pid -> faulthandler dump
    backtraces: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about the evidence itself (e.g. gdb missing)
    seed: int = 0  # replay this run with --seed
    perturbations: list[str] = field(default_factory=list)
    mode: str = "fresh"  # "fresh", "fork-server/fast" or "fork-server/full"
    finished_at: float = 0.0  # seconds since the session started
    replay: str = ""  # the command that reruns this run

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal)

    def __str__(self) -> str:
        where = f"@{self.phase.value}" if self.phase else ""
        how = f" ({self.signal_name})" if self.signal else ""
        return f"{self.scenario}[{self.variant}]#{self.index}: {self.outcome.value}{where}{how} in {self.duration:.2f}s"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        data["phase"] = self.phase.value if self.phase else None
        data["signal_name"] = self.signal_name
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["outcome"] = Outcome(data["outcome"])
        fields["phase"] = Phase(data["phase"]) if data.get("phase") else None
        return cls(**fields)
