"""Expand scenarios x variants x repeats into run specs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeguard.build import BuiltFixture, build_fixture
from lifeguard.errors import UsageError
from lifeguard.interpreter import Interpreter
from lifeguard.scenarios import Scenario
from lifeguard.supervise import RunSpec


@dataclass(frozen=True)
class PlanOptions:
    repeat: int | None = None  # overrides every scenario's default
    timeout: float | None = None  # overrides every scenario's default
    variants: tuple[str, ...] | None = None  # None: every variant a scenario declares
    cores: bool = True  # read native stacks of crashes from core files
    keep_cores: bool = False


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:80]


def series_of(scenarios: Sequence[Scenario], options: PlanOptions) -> list[tuple[Scenario, str, int]]:
    """(scenario, variant, runs) for every series the plan will run."""
    series = []
    for item in scenarios:
        variants = item.variants
        if options.variants is not None:
            variants = tuple(v for v in variants if v in options.variants)
        for variant in variants:
            series.append((item, variant, options.repeat or item.repeat_for(variant)))
    if not series:
        raise UsageError("nothing to run: no scenario x variant is selected")
    return series


def build_all(series: list[tuple[Scenario, str, int]], interp: Interpreter,
              force: bool = False) -> dict[tuple[str, str], BuiltFixture]:
    """Build each fixture variant once before any run starts (compiler errors surface early)."""
    built: dict[tuple[str, str], BuiltFixture] = {}
    for item, variant, _ in series:
        if item.fixture and (item.fixture, variant) not in built:
            near = Path(item.path).parent if item.path else None
            built[(item.fixture, variant)] = build_fixture(item.fixture, variant, interp, near=near, force=force)
    return built


def make_specs(series: list[tuple[Scenario, str, int]], options: PlanOptions, interp: Interpreter,
               built: dict[tuple[str, str], BuiltFixture], runs_dir: Path) -> list[RunSpec]:
    """Interleave the series (run 0 of every series first) so an early failure shows early."""
    specs = []
    longest = max(runs for _, _, runs in series)
    for index in range(longest):
        for item, variant, runs in series:
            if index >= runs:
                continue
            fixture = built.get((item.fixture, variant)) if item.fixture else None
            specs.append(RunSpec(
                scenario=item.name, variant=variant, index=index, kind=item.kind, path=item.path,
                function=item.function, code=item.code, interpreter=interp,
                timeout=options.timeout or item.timeout,
                run_dir=runs_dir / f"{_safe(item.name)}-{variant}-{index}",
                expected=str(item.expectation(variant, interp.short_version)),
                fixture=item.fixture, fixture_dir=str(fixture.directory) if fixture else None,
                cores=options.cores, keep_cores=options.keep_cores,
            ))
    return specs
