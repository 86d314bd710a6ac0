"""The survey's pipeline, from the packages named to survey.json: inventory, hooks, probes, triage, reports.

``lifeguard survey`` (cli/survey.py) parses its arguments into a ``SurveyRequest`` and prints what
``run_survey`` returns; nothing here prints but the session's own terminal output.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeguard.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED, SurveyError
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome
from lifeguard.model.survey import Package
from lifeguard.report.files import claim_report_folder
from lifeguard.report.survey import Survey, needs_a_look, write_survey_json, write_survey_page
from lifeguard.session.setup import SessionSetup, run_session
from lifeguard.survey.hooking import entry_point_hooks, hook_for, read_hooks_file
from lifeguard.survey.inventory import read_inventory
from lifeguard.survey.limitations import read_limitations
from lifeguard.survey.plan import survey_options, survey_scenarios
from lifeguard.survey.repro import write_reproduction
from lifeguard.survey.targets import choose_targets
from lifeguard.survey.triage import triage

if TYPE_CHECKING:
    from lifeguard.survey.hooking import HookChoice


@dataclass(frozen=True)
class SurveyRequest:
    """What to survey and how: the packages of ``interpreter``'s environment, or all of them."""

    interpreter: Interpreter
    names: tuple[str, ...]  # distributions named; empty: every installed one with an extension module
    report: Path | None  # the survey's folder; None: a new temporary one
    probes: tuple[str, ...]
    timeout: float  # per run
    hooks_file: Path | None = None
    limitations_file: Path | None = None
    repeat: int = 1
    jobs: int = 1
    native: bool = True


@dataclass(frozen=True)
class SurveyRun:
    """Where the survey wrote its reports, and the survey (None: nothing in the packages could be probed)."""

    report: Path
    survey: Survey | None


def run_survey(request: SurveyRequest) -> SurveyRun:
    """Find, probe and triage the packages ``request`` names; write survey.json, survey.html and the reports."""
    user = read_hooks_file(request.hooks_file) if request.hooks_file is not None else {}
    limitations = read_limitations()
    if request.limitations_file is not None:
        limitations += read_limitations(request.limitations_file)
    inventory = read_inventory(request.interpreter, list(request.names))
    if inventory.missing:
        verb = "is" if len(inventory.missing) == 1 else "are"
        raise SurveyError(f"{', '.join(inventory.missing)} {verb} not installed in "
                          f"{request.interpreter.executable}")
    declared, problems = entry_point_hooks(inventory.hooks)
    packages = survey_packages(inventory.distributions, user, declared, bool(request.names), problems)
    report = (request.report or Path(tempfile.mkdtemp(prefix="lifeguard-survey-"))).resolve()
    claim_report_folder(report)
    scenarios, meaning = survey_scenarios([p for p in packages if p.targets], request.probes, report / "probes",
                                          request.timeout, repeat=request.repeat)
    if not scenarios:
        return SurveyRun(report, None)
    # Every run kept: a clean entry says what its runs did with the module (their records).
    setup = SessionSetup(request.interpreter, jobs=request.jobs, report_dir=report, native=request.native,
                         keep_all_runs=True)
    session = run_session(scenarios, survey_options(native=request.native), setup)
    entries = triage(session, meaning, limitations,
                     lambda probed, run: write_reproduction(report / "repro", probed, run, request.timeout))
    survey = Survey(session, tuple(packages), tuple(entries), request.probes, tuple(problems))
    write_survey_json(survey, report)
    write_survey_page(survey, report)
    return SurveyRun(report, survey)


def survey_exit_code(survey: Survey) -> int:
    """0 nothing failed or only documented limitations; 1 a candidate, a probe error or a probe that exercised
    nothing; 3 lifeguard failed a run; 130 interrupted."""
    session = survey.session
    if session.interrupted:
        return EXIT_INTERRUPTED
    if any(result.outcome is Outcome.ERROR for result in session.results):
        return EXIT_INTERNAL
    return EXIT_UNEXPECTED if needs_a_look(survey.entries) else EXIT_OK


def survey_packages(distributions: tuple[dict[str, Any], ...], user: dict[str, HookChoice],
                    declared: dict[str, HookChoice], named: bool, problems: list[str]) -> list[Package]:
    """The surveyed packages with their targets and hooks; with --installed, only those with extensions."""
    found = []
    for dist in distributions:
        extensions = tuple(str(name) for name in dist["extensions"])
        if not extensions and not named:
            continue
        choice = hook_for(str(dist["name"]), user, declared)
        targets, skipped = choose_targets(extensions, choice.modules)
        if not extensions:
            problems.append(f"{dist['name']} {dist['version']} has no extension module: nothing to probe")
        found.append(Package(str(dist["name"]), str(dist["version"]), extensions, targets, skipped, choice.hook))
    return found
