"""Run results: one frozen record per run, read by every sink alike."""

from __future__ import annotations

import signal as signal_module
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.scenario import Scenario
from lifeguard.model.stats import SeriesStats


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


@dataclass(frozen=True)
class SeriesSummary:
    """One scenario x variant: its runs judged against its expectation."""

    scenario: str
    variant: str
    expected: str
    runs: int
    counts: dict[str, int]
    verdict: Verdict
    description: str = ""
    where: str = ""
    first_unexpected: int | None = None  # index into the series' results
    stats: SeriesStats | None = None
    modes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "variant": self.variant, "expected": self.expected,
            "runs": self.runs, "counts": self.counts, "verdict": self.verdict.value,
            "description": self.description, "where": self.where,
            "stats": self.stats.to_dict() if self.stats else None, "modes": list(self.modes),
        }



@dataclass
class Session:
    """Everything one invocation ran and what came of it."""

    interpreter: Interpreter
    scenarios: list[Scenario]
    results: list[RunResult] = field(default_factory=list)
    summaries: list[SeriesSummary] = field(default_factory=list)
    interrupted: bool = False
    started: float = field(default_factory=time.time)
    duration: float = 0.0
    runs_dir: Path | None = None
    base_seed: int = 0

    @property
    def all_expected(self) -> bool:
        return bool(self.summaries) and all(s.verdict is Verdict.EXPECTED for s in self.summaries)
