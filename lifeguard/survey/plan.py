"""The survey's plan: one generated probe scenario per package x module x probe mode, each driven by its hook.

Probe scenarios come from lifeguard.plan.probes (the modes are its PROBES, never listed again here), so a
survey's runs are exactly what `lifeguard probe MODULE --hook ...` would run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeguard.model.scenario import Scenario
from lifeguard.model.survey import Package
from lifeguard.plan.probes import probe_options, probe_scenarios
from lifeguard.plan.scheduler import PlanOptions


@dataclass(frozen=True)
class Probed:
    """What one probe scenario is in the survey."""

    package: Package
    module: str
    probe: str


def survey_scenarios(packages: Sequence[Package], probes: Sequence[str], folder: Path,
                     timeout: float, *, repeat: int = 1) -> tuple[list[Scenario], dict[str, Probed]]:
    """Every package's targets x ``probes`` (``repeat`` runs each), and what each scenario (by name) stands for."""
    scenarios: list[Scenario] = []
    meaning: dict[str, Probed] = {}
    for package in packages:
        hook = package.hook.spec() if package.hook is not None else None
        for module in package.targets:
            if any(item.module == module for item in meaning.values()):
                continue  # two distributions that install one module: it is probed once, for the first
            made = probe_scenarios(module, probes, folder / package.name, hook=hook, timeout=timeout, repeat=repeat)
            for scenario, probe in zip(made, dict.fromkeys(probes), strict=True):
                scenarios.append(scenario)
                meaning[scenario.name] = Probed(package, module, probe)
    return scenarios, meaning


def survey_options(native: bool) -> PlanOptions:
    """The probes' own options (fresh interpreters, -X dev, PYTHONMALLOC=debug). Early hang detection, once the
    plan has it (a PlanOptions field), is set here: a survey's hangs are most of its time."""
    return probe_options(native=native)
