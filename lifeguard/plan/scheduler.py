"""Expand scenarios x variants x repeats (x perturbations) into run specs, lazily.

A fixed plan runs each series its repeat count. Stress controls change when a
series stops: ``until_fail`` stops a series at its first failed run, ``duration``
keeps every series going until the time is up; either is capped by ``repeat``.
Series are interleaved (run 0 of every series first) so an early failure shows early.
"""

from __future__ import annotations

import os
import random
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lifeguard.build import BuiltFixture, build_fixture
from lifeguard.errors import UsageError
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import RunResult
from lifeguard.model.run import BacktraceMethod, RunKind, RunSpec, StartMode
from lifeguard.model.scenario import Scenario, evidence_name
from lifeguard.model.seeds import run_seed, text_digest
from lifeguard.plan.perturbations import START_PERTURBATIONS, check_perturbations, supervisor_side

# With --until-fail and neither --repeat nor --duration, a series stops here.
UNTIL_FAIL_DEFAULT_CAP = 1000
# Native evidence (gdb on a hang, a core on a crash) costs about a second a run: a
# series of 50 identical reproductions needs it for its first few failures only.
NATIVE_EVIDENCE_PER_SERIES = 3


@dataclass(frozen=True)
class PlanOptions:
    repeat: int | None = None  # overrides every scenario's default (a cap with until_fail/duration)
    timeout: float | None = None  # overrides every scenario's default
    variants: tuple[str, ...] | None = None  # None: every variant a scenario declares
    cores: bool = True  # native stacks of failed runs (cores / replay on crashes, gdb on hangs)
    keep_cores: bool = False
    backtrace: str = "core"  # "core" or "replay" (see RunSpec.backtrace)
    until_fail: bool = False
    duration: float | None = None  # seconds
    seed: int | None = None  # replay: every run uses this seed
    base_seed: int | None = None  # derive every run's seed from this (random when None)
    perturbations: tuple[str, ...] = ()
    mode: str = "auto"  # "auto", "fresh" or "fork-server"
    exitfirst: bool = False  # -x: stop starting runs at the first unexpected verdict
    shard: tuple[int, int] | None = None  # (K, N): this session runs shard K of N of the plan's runs
    hang_settle: float | None = None  # end a hung run early after this settle period (RunSpec.hang_settle)


def plan_fingerprint(series: Sequence[tuple[Scenario, str, int]], options: PlanOptions) -> str:
    """What shards of one plan share: its series (name, variant, runs, expectation as declared), and the
    options that change what a run does. ``lifeguard merge`` refuses shards whose fingerprints differ."""

    parts = [f"{item.name}\0{variant}\0{cap}\0{item.expect.get(variant)!r}\0{item.timeout}" for item, variant, cap
             in series]
    parts.append(repr((options.timeout, options.perturbations, options.mode, options.until_fail, options.duration,
                       options.seed)))
    return text_digest("\n".join(parts), 16)


def shard_base_seed(fingerprint: str) -> int:
    """The base seed every shard of a plan derives when none is given: the same in each, so no two shards
    ever run the same run with the same seed (they never run the same run at all)."""
    return int(fingerprint[:8], 16)


def first_in_shard(position: int, shard: tuple[int, int] | None) -> tuple[int, int]:
    """(first run index, step) of a series at ``position`` in the plan for ``shard``: runs spread over the
    shards round robin, each series starting one shard further, so short series fill every shard too."""
    if shard is None:
        return 0, 1
    number, count = shard
    return (number - 1 - position) % count, count


def series_of(scenarios: Sequence[Scenario], options: PlanOptions) -> list[tuple[Scenario, str, int]]:
    """(scenario, variant, runs) for every series the plan will run (runs: the count or cap)."""
    series = []
    for item in scenarios:
        variants = item.variants
        if options.variants is not None:
            variants = tuple(v for v in variants if v in options.variants)
        for variant in variants:
            if options.repeat:
                runs = options.repeat
            elif options.seed is not None:
                runs = 1
            elif options.duration:
                runs = 0  # no cap: the clock decides
            elif options.until_fail:
                runs = UNTIL_FAIL_DEFAULT_CAP
            else:
                runs = item.repeat_for(variant)
            series.append((item, variant, runs))
    if not series:
        raise UsageError("nothing to run: no scenario x variant is selected")
    return series


def build_all(series: list[tuple[Scenario, str, int]], interp: Interpreter, force: bool = False,
              on_compile: Callable[[str, str], None] | None = None) -> dict[tuple[str, str], BuiltFixture]:
    """Build each fixture variant once before any run starts (compiler errors surface early);
    ``on_compile(fixture, variant)`` is told before each build that is not cached."""
    built: dict[tuple[str, str], BuiltFixture] = {}
    for item, variant, _ in series:
        if item.fixture and (item.fixture, variant) not in built:
            built[(item.fixture, variant)] = build_fixture(
                item.fixture, variant, interp, near=item.fixture_search_start, force=force, on_compile=on_compile)
    return built


def exit_mode_for(item: Scenario, interp: Interpreter, mode: str,
                  perturbations: tuple[str, ...] = ()) -> StartMode:
    """How a run starts and ends, from ``--mode`` ("auto", "fresh" or "fork-server").

    A scenario whose expectation lives in the exit phase (or that crashes at
    exit, as a static destructor does) needs a whole process lifetime: a fresh
    interpreter under "auto", full finalization when the fork-server is forced.
    A fork-server child that skipped finalization would pass such a scenario falsely.
    """
    if mode == "fresh" or (mode == "auto" and not item.fork_server) or item.kind is RunKind.COMMAND:
        return StartMode.FRESH  # a command is an executable of its own: nothing to fork it from
    if any(p in START_PERTURBATIONS for p in perturbations):
        return StartMode.FRESH  # -X dev and PYTHONMALLOC act at interpreter start, which a fork skips
    exit_bound = any(item.expectation(v, interp.short_version).phase is Phase.EXIT for v in item.variants)
    if item.kind is not RunKind.FUNCTION:
        exit_bound = True  # scripts and -c code: nothing says their exit is uninteresting
    if exit_bound:
        return StartMode.FRESH if mode == "auto" else StartMode.FORK_FULL
    return StartMode.FORK_FAST


def target_words(item: Scenario) -> list[str]:
    """How ``lifeguard run`` names a scenario's target on its command line, last (a plain target's
    arguments follow it)."""
    if item.kind is RunKind.CODE:
        return ["-c", item.code or "", *item.argv[1:]]
    if item.kind is RunKind.MODULE:
        return ["-m", item.module, *item.argv[1:]]
    if item.kind is RunKind.COMMAND:
        return ["--", *item.argv]
    if item.kind is RunKind.SCRIPT:
        return [*item.argv] if item.argv else [item.path]
    return [f"{item.path}::{item.name}"]


def replay_command(item: Scenario, variant: str, seed: int, perturbations: tuple[str, ...], *,
                   timeout: float | None = None, python: str | None = None) -> str:
    """The command that reruns one run with the same seed and perturbations, ready to paste: the real
    code or target, and the ``--timeout`` and ``--python`` the session was given. The options come first:
    whatever follows a plain target is its own."""
    if item.replay is not None:
        return item.replay.replace("{seed}", str(seed))
    words = ["lifeguard", "run", "--seed", str(seed)]
    if item.fixture:
        words += ["--variant", variant]
    if perturbations:
        words += ["--perturb", ",".join(perturbations)]
    if timeout is not None:
        words += ["--timeout", f"{timeout:g}"]
    if python is not None:
        words += ["--python", python]
    return shlex.join(words + target_words(item))


@dataclass
class _Series:
    scenario: Scenario
    variant: str
    cap: int  # 0: no cap; with a shard, this shard's share
    first: int = 0  # the run index of this series' first run here, and the step between runs (shards)
    step: int = 1
    here: bool = True  # False: the series has no run in this shard
    issued: int = 0
    failures: int = 0
    stopped: bool = False


@dataclass
class Scheduler:
    """Hands out run specs one at a time (thread-safe) and decides when series stop."""

    series: list[tuple[Scenario, str, int]]
    options: PlanOptions
    interpreter: Interpreter
    built: dict[tuple[str, str], BuiltFixture]
    runs_dir: Path
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        check_perturbations(self.options.perturbations)
        self._lock = threading.Lock()
        self.fingerprint = plan_fingerprint(self.series, self.options)
        self._state = []
        for position, (item, variant, cap) in enumerate(self.series):
            first, step = first_in_shard(position, self.options.shard)
            share = cap if cap == 0 else max(0, -(-(cap - first) // step))  # indices first, first+step, ... < cap
            # A series with no run in this shard is not this shard's (stopped, never summarised here).
            here = cap == 0 or share > 0
            self._state.append(_Series(item, variant, share, first, step, here=here, stopped=not here))
        if self.options.base_seed is not None:
            self.base_seed = self.options.base_seed
        elif self.options.shard is not None:
            self.base_seed = shard_base_seed(self.fingerprint)
        else:
            self.base_seed = random.getrandbits(32)
        # Replay lines name --python only when the children run under another interpreter than lifeguard's.
        same = os.path.realpath(self.interpreter.executable) == os.path.realpath(sys.executable)
        self._replay_python = None if same else self.interpreter.executable

    def series_here(self) -> list[tuple[Scenario, str, int]]:
        """The series with runs in this session: every one, or those of its shard (with this shard's count)."""
        return [(s.scenario, s.variant, s.cap) for s in self._state if s.here]

    @property
    def total(self) -> int | None:
        """Runs planned, or None when the clock or the first failure decides."""
        if self.options.duration or self.options.until_fail:
            return None
        return sum(s.cap for s in self._state)

    def _time_up(self) -> bool:
        return bool(self.options.duration) and time.monotonic() - self.started >= self.options.duration  # type: ignore[operator]

    def next_spec(self) -> RunSpec | None:
        with self._lock:
            if self._time_up():
                return None
            live = [s for s in self._state if not s.stopped and (s.cap == 0 or s.issued < s.cap)]
            if not live:
                return None
            chosen = min(live, key=lambda s: s.issued)  # round robin: interleave the series
            index = chosen.first + chosen.issued * chosen.step
            chosen.issued += 1
            native = chosen.failures < NATIVE_EVIDENCE_PER_SERIES
        return self.make_spec(chosen.scenario, chosen.variant, index, native=native)

    def stop(self) -> None:
        """No new run starts (-x, or lifeguard's own error); runs already under way finish."""
        with self._lock:
            for state in self._state:
                state.stopped = True

    def settled_unexpected(self, result: RunResult, finished: int, verdict: Verdict) -> bool:
        """Does ``result`` make its series' verdict unexpected, whatever its other runs do? (a run its
        expectation cannot accept, or the last run of a "sometimes:" series that never hit). ``finished``
        and ``verdict``: the series' runs so far, this one included, and their verdict."""
        for state in self._state:
            if state.scenario.name != result.scenario or state.variant != result.variant:
                continue
            expectation = state.scenario.expectation(state.variant, self.interpreter.short_version)
            if not expectation.accepts(result.outcome, result.phase):
                return True
            return 0 < state.cap <= finished and verdict is Verdict.UNEXPECTED
        return False

    def series_done(self, scenario: str, variant: str, finished: int) -> bool:
        """Has the series had its last run, now that ``finished`` of its runs are in (none still under way,
        and none more to start: its count reached, stopped, or the session's time up)?"""
        with self._lock:
            for state in self._state:
                if state.scenario.name == scenario and state.variant == variant:
                    no_more = state.stopped or (0 < state.cap <= state.issued) or self._time_up()
                    return no_more and finished >= state.issued
        return False

    def record(self, result: RunResult) -> None:
        if result.outcome is Outcome.PASSED:
            return
        with self._lock:
            for state in self._state:
                if state.scenario.name == result.scenario and state.variant == result.variant:
                    state.failures += 1
                    if self.options.until_fail:
                        state.stopped = True

    def make_spec(self, item: Scenario, variant: str, index: int, native: bool = True) -> RunSpec:
        interp = self.interpreter
        fixture = self.built.get((item.fixture, variant)) if item.fixture else None
        seed = self.options.seed if self.options.seed is not None else run_seed(
            self.base_seed, item.name, variant, index)
        flags, env = supervisor_side(self.options.perturbations, seed)
        replay = replay_command(item, variant, seed, self.options.perturbations, timeout=self.options.timeout,
                                python=self._replay_python)
        return RunSpec(
            scenario=item.name, variant=variant, index=index, kind=RunKind(item.kind), path=item.path,
            function=item.function, code=item.code, interpreter=interp,
            timeout=self.options.timeout or item.timeout,
            run_dir=self.runs_dir / f"{evidence_name(item.name)}-{variant}-{index}",
            expected=str(item.expectation(variant, interp.short_version)),
            fixture=item.fixture, fixture_dir=str(fixture.directory) if fixture else None,
            cores=self.options.cores and native, keep_cores=self.options.keep_cores,
            backtrace=BacktraceMethod(self.options.backtrace),
            seed=seed, perturbations=tuple(self.options.perturbations), python_flags=flags, env=env,
            mode=exit_mode_for(item, interp, self.options.mode, self.options.perturbations),
            replay=replay, argv=item.argv, module=item.module, workdir=item.workdir,
            deadline_from_body=item.deadline_from_body, hang_settle=self.options.hang_settle,
        )
