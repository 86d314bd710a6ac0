"""Run results: one frozen record per run with its evidence as typed records, and the session they
make up. Every sink reads these; only the JSON sinks turn them into dicts (``to_dict``)."""

from __future__ import annotations

import signal as signal_module
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.run import StartMode
from lifeguard.model.scenario import Scenario
from lifeguard.model.stats import SeriesStats

if TYPE_CHECKING:  # a passing session never reads a stack: model.stacks is imported when one is
    from lifeguard.model.stacks import ProcessStacks


# What one run's text may put into report.json and results.jsonl (and hold in memory), whatever wrote it: a
# reason quotes a child's exception or corruption message, notes may quote an error, and a child writes any
# size it likes (a 300 MiB line on the result channel reached report.json whole). The stack, tail and event
# readers bound their own evidence; these bound the rest, cut with a marker saying how much was cut.
REASON_CHARS = 2000  # one line: why this outcome
NOTE_CHARS = 2000
MAX_NOTES = 50
MESSAGE_CHARS = 2000  # a corruption message
DATA_HEX_CHARS = 2 * 256  # a corruption's bytes in hex: child.report_corruption sends the first 256
MAX_CORRUPTIONS = 20  # corruption records of one run (its reason quotes the first)


def cut(text: str, limit: int) -> str:
    """``text``, or its start and a marker saying how much was cut: ``limit`` characters in all, so that a
    text cut once is never cut again."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text)} characters, cut]"
    return text[: max(0, limit - len(marker))] + marker


def series_label(scenario: str, variant: str) -> str:
    """``name[variant]``, the way every report names a series; a name that already ends with the variant as
    its pytest id (``test_x[buggy]``, ``test_x[3-buggy]``) is not given it twice, and a pytest test (its node
    id) of no fixture variant is named by its id alone."""
    if variant == "default" and "::" in scenario:
        return scenario
    tail = scenario.rpartition("[")[2].rstrip("]") if scenario.endswith("]") else ""
    return scenario if variant in tail.split("-") else f"{scenario}[{variant}]"


def counts_text(counts: Mapping[str, int]) -> str:
    """``3 crashed@exit, 1 passed``: a series' outcomes, the way every report counts them."""
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "no runs"


def signal_name(signum: int | None) -> str | None:
    if signum is None:
        return None
    try:
        return signal_module.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


@dataclass(frozen=True)
class Event:
    """One record of the run's result channel (names in lifeguard.child.protocol)."""

    name: str  # "started", "forked", "gc-foreign-thread", ...
    pid: int | None = None
    time: float | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # the rest of the record

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.name, "pid": self.pid, "time": self.time, **self.fields}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        rest = {k: v for k, v in data.items() if k not in ("event", "pid", "time")}
        return cls(str(data.get("event", "")), data.get("pid"), data.get("time"), rest)


@dataclass(frozen=True)
class Corruption:
    """Broken data a scenario reported (child.report_corruption)."""

    pid: int | None
    message: str
    data_hex: str = ""
    data_len: int = 0

    def bounded(self) -> Corruption:
        """This record with its message and bytes cut to MESSAGE_CHARS and DATA_HEX_CHARS."""
        if len(self.message) <= MESSAGE_CHARS and len(self.data_hex) <= DATA_HEX_CHARS:
            return self
        return Corruption(self.pid, cut(self.message, MESSAGE_CHARS), self.data_hex[:DATA_HEX_CHARS], self.data_len)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "message": self.message, "data_hex": self.data_hex, "data_len": self.data_len}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Corruption:
        return cls(data.get("pid"), str(data.get("message", "")), str(data.get("data_hex", "")),
                   int(data.get("data_len", 0)))


@dataclass(frozen=True)
class Leftover:
    """A process of the run's tree still alive after the main process exited."""

    pid: int
    comm: str
    ppid: int | None
    state: str = ""  # its /proc state letter when found: "T" (stopped) is not "running"

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "comm": self.comm, "ppid": self.ppid, "state": self.state}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Leftover:
        return cls(int(data["pid"]), str(data.get("comm", "?")), data.get("ppid"), str(data.get("state", "")))


@dataclass(frozen=True)
class ThreadRef:
    """A thread a finding is about, and its part in the story ("holds the GIL", "forks", ...)."""

    pid: int
    tid: int
    name: str | None
    role: str

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "tid": self.tid, "name": self.name, "role": self.role}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThreadRef:
        return cls(int(data["pid"]), int(data["tid"]), data.get("name"), str(data.get("role", "")))


@dataclass(frozen=True)
class Finding:
    """One explanation: a stable kind, a one-line summary, who is involved, and what to do."""

    kind: str
    summary: str
    hint: str
    threads: tuple[ThreadRef, ...] = ()
    frames: tuple[str, ...] = ()  # the frames that make the case, rendered
    details: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()  # the lines and readings it rests on, so a reader can check it

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary, "hint": self.hint,
                "threads": [t.to_dict() for t in self.threads], "frames": list(self.frames),
                "details": self.details, "evidence": list(self.evidence)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(str(data["kind"]), str(data.get("summary", "")), str(data.get("hint", "")),
                   tuple(ThreadRef.from_dict(t) for t in data.get("threads", ())),
                   tuple(data.get("frames", ())), dict(data.get("details") or {}),
                   tuple(data.get("evidence", ())))

    def __str__(self) -> str:
        return f"[{self.kind}] {self.summary}"


@dataclass(frozen=True)
class StderrLine:
    """A line of a run's whole stderr that a library message matched (diagnose.messages)."""

    number: int  # 1-based line number in the run's stderr
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StderrLine:
        return cls(int(data["number"]), str(data.get("text", "")))


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
    corruption: tuple[Corruption, ...] = ()
    leftover_processes: tuple[Leftover, ...] = ()
    evidence: dict[str, str] = field(default_factory=dict)  # name -> path
    stdout_tail: str = ""
    stderr_tail: str = ""
    python_stacks: dict[str, str] = field(default_factory=dict)  # pid -> faulthandler dump
    backtraces: tuple[ProcessStacks, ...] = ()
    findings: tuple[Finding, ...] = ()
    events: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()  # about the evidence itself (e.g. gdb missing)
    seed: int = 0  # replay this run with --seed
    perturbations: tuple[str, ...] = ()
    mode: StartMode = StartMode.FRESH
    finished_at: float = 0.0  # seconds since the session started
    replay: str = ""  # the command that reruns this run
    stderr_messages: tuple[StderrLine, ...] = ()  # library messages found in the whole stderr, in order
    oom_kills: int = 0  # the kernel's out-of-memory kills while the run lived (its SIGKILL was one of them)

    def __post_init__(self) -> None:
        # Every way a result is made (classify, explain, dataclasses.replace) passes here: the bounds on what
        # a child's text may put into the reports hold for all of them.
        limited = {
            "reason": cut(self.reason, REASON_CHARS),
            "fatal_error": None if self.fatal_error is None else cut(self.fatal_error, REASON_CHARS),
            "notes": _bounded_notes(self.notes),
            "corruption": tuple(c.bounded() for c in self.corruption[:MAX_CORRUPTIONS]),
        }
        for name, value in limited.items():
            if value != getattr(self, name):
                object.__setattr__(self, name, value)  # frozen: set once, while the record is being made

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal)

    def __str__(self) -> str:
        where = f"@{self.phase.value}" if self.phase else ""
        how = f" ({self.signal_name})" if self.signal else ""
        label = series_label(self.scenario, self.variant)
        return f"{label}#{self.index}: {self.outcome.value}{where}{how} in {self.duration:.2f}s"

    def to_dict(self) -> dict[str, Any]:
        """The run as report.json and results.jsonl hold it (schema in docs/reports.md)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(
            outcome=self.outcome.value,
            phase=self.phase.value if self.phase else None,
            signal_name=self.signal_name,
            corruption=[c.to_dict() for c in self.corruption],
            leftover_processes=[p.to_dict() for p in self.leftover_processes],
            evidence=dict(self.evidence),
            python_stacks=dict(self.python_stacks),
            # Each process with its text rendering, as the terminal and backtraces.txt show it.
            backtraces=[{**p.to_dict(), "text": p.text} for p in self.backtraces],
            findings=[f.to_dict() for f in self.findings],
            events=[e.to_dict() for e in self.events],
            notes=list(self.notes),
            perturbations=list(self.perturbations),
            mode=self.mode.value,
            stderr_messages=[line.to_dict() for line in self.stderr_messages],
        )
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known.update(
            outcome=Outcome(data["outcome"]),
            phase=Phase(data["phase"]) if data.get("phase") else None,
            corruption=tuple(Corruption.from_dict(c) for c in data.get("corruption", ())),
            leftover_processes=tuple(Leftover.from_dict(p) for p in data.get("leftover_processes", ())),
            backtraces=_stacks_from(data.get("backtraces", ())),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", ())),
            events=tuple(Event.from_dict(e) for e in data.get("events", ())),
            notes=tuple(data.get("notes", ())),
            perturbations=tuple(data.get("perturbations", ())),
            mode=StartMode(data.get("mode", StartMode.FRESH.value)),
            stderr_messages=tuple(StderrLine.from_dict(line) for line in data.get("stderr_messages", ())),
        )
        return cls(**known)


def _bounded_notes(notes: tuple[str, ...]) -> tuple[str, ...]:
    if len(notes) <= MAX_NOTES and all(len(note) <= NOTE_CHARS for note in notes):
        return notes
    kept = tuple(cut(note, NOTE_CHARS) for note in notes[:MAX_NOTES])
    if len(notes) > MAX_NOTES:
        kept += (f"{len(notes) - MAX_NOTES} more note(s) not kept",)
    return kept


def _stacks_from(items: Any) -> tuple[ProcessStacks, ...]:
    from lifeguard.model.stacks import ProcessStacks

    return tuple(ProcessStacks.from_dict(p) for p in items)


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
    # The run whose evidence an unexpected series shows: the first it could not accept, else its first run
    # (a "sometimes:" series that never hit). None for an expected series.
    first_unexpected: RunResult | None = None
    first_failure: RunResult | None = None  # the first run, in run order, that did not pass
    stats: SeriesStats | None = None
    modes: tuple[str, ...] = ()
    duration: float = 0.0  # seconds, the series' runs together
    # Runs (not under exit-starve) with other threads alive into finalization: a clean bound says it may be loose.
    threads_at_exit: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "variant": self.variant, "expected": self.expected,
            "runs": self.runs, "counts": self.counts, "verdict": self.verdict.value,
            "description": self.description, "where": self.where,
            "stats": self.stats.to_dict() if self.stats else None, "modes": list(self.modes),
            "runs_with_threads_at_exit": self.threads_at_exit,
        }


@dataclass
class Session:
    """Everything one invocation ran and what came of it.

    ``results`` holds the runs kept in memory, not every run: the engine keeps the runs that are evidence (did
    not pass, or were unexpected; lifeguard.run.sink.RUNS_KEPT of them) unless told to keep every run (the
    pytest plugin). Every finished run is counted in ``finished`` and in its series' summary, and streamed to
    the sinks as it finishes (results.jsonl, from which report.json lists them all).
    """

    interpreter: Interpreter
    scenarios: list[Scenario]
    results: list[RunResult] = field(default_factory=list)
    summaries: list[SeriesSummary] = field(default_factory=list)
    finished: int = 0  # runs that finished, kept in ``results`` or not
    interrupted: bool = False
    stopped: bool = False  # -x: stopped at the first unexpected verdict (later runs not started)
    failure: str = ""  # lifeguard's own error that stopped the session early (a full disk, a broken sink)
    started: float = field(default_factory=time.time)
    duration: float = 0.0
    runs_dir: Path | None = None
    base_seed: int = 0
    membership: str = ""  # how runs' processes were tracked: "cgroup2", "cgroup1-pids" or "subreaper"
    plan: str = ""  # the plan's fingerprint (plan.scheduler.plan_fingerprint): shards of one plan share it
    shard: str = ""  # "K/N" when this session ran shard K of N of the plan; "" for the whole plan
    merged: tuple[str, ...] = ()  # `lifeguard merge`: the shard report folders this session was made from

    @property
    def all_expected(self) -> bool:
        """Every verdict expected, in a session that ran to its end (an interrupted one, or one that
        lifeguard's own error stopped, proves nothing)."""
        return (not self.interrupted and not self.failure and bool(self.summaries)
                and all(s.verdict is Verdict.EXPECTED for s in self.summaries))
