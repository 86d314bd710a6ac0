"""``lifeguard survey``: probe the compiled packages of an environment and triage what fails."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeguard.cli.base import Command
from lifeguard.cli.options import positive_float, positive_int
from lifeguard.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED, SurveyError
from lifeguard.plan.probes import PROBES

if TYPE_CHECKING:
    from lifeguard.model.survey import Package
    from lifeguard.survey.hooking import HookChoice

SURVEY_TIMEOUT = 30.0  # per run: a survey's packages start slower than a user's own small module


class SurveyCommand(Command):
    """Probe the compiled packages of an environment for lifetime bugs, and triage what fails.

    Find the extension modules of each named distribution (or of the distributions of a requirements file, or
    of every installed one with --installed) from its installed files in the target interpreter, probe a few
    public ones per package with a hook that uses the package as a program would (yours from --hooks FILE,
    the package's own from the entry point group lifeguard.hooks, lifeguard's, or a careful generic one),
    and triage each failed probe: documented (a known limitation, with its link), candidate (a possible
    bug, with a standalone reproduction script in DIR/repro/), probe-error (the module failed to import,
    the hook raised) or not exercised (the hook used nothing of the module: no verdict on it). Writes
    DIR/survey.json (with what each probe did with the module) and DIR/survey.html beside the usual
    reports. Exit 0: nothing failed, or only documented limitations; 1: a candidate, a probe error or a
    probe that exercised nothing; 2: usage.
    """

    name = "survey"
    python_help = "the interpreter whose environment is surveyed (default: this one); may be another venv's"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("packages", nargs="*", metavar="PACKAGE", help="installed distributions to survey")
        parser.add_argument("--requirements", type=Path, metavar="FILE",
                            help="survey the distributions a requirements file names (versions are not checked)")
        parser.add_argument("--installed", action="store_true",
                            help="survey every installed distribution that has an extension module")
        super().add_arguments(parser)
        parser.add_argument("--report", type=Path, metavar="DIR", help="write survey.json, survey.html, "
                            "the reproduction scripts and the usual reports to DIR (default: a temporary folder, "
                            "named at the end)")
        parser.add_argument("--probe", dest="probes", action="append", choices=tuple(PROBES),
                            help="run only this probe mode (repeatable; default: all of them)")
        parser.add_argument("--hooks", type=Path, metavar="FILE",
                            help="a Python file: HOOKS = {'distribution': function, ...} (each called as "
                                 "function(module)), and optionally MODULES = {'distribution': ['module', ...]}")
        parser.add_argument("--limitations", type=Path, metavar="FILE",
                            help="more documented limitations, in the format of lifeguard's limitations.json")
        parser.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N",
                            help="runs in parallel (default 1)")
        parser.add_argument("--timeout", type=positive_float, default=SURVEY_TIMEOUT, metavar="SECONDS",
                            help=f"deadline per run (default {SURVEY_TIMEOUT:g})")
        parser.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                            help="runs per package x module x mode (default 1; a race may need several)")
        parser.add_argument("--no-native", action="store_true",
                            help="skip native stacks (gdb on hangs, core files on crashes)")

    def run(self, args: argparse.Namespace) -> int:
        # The survey's modules (and packaging, for versions) only for this command: `lifeguard run` needs neither.
        from lifeguard.cli.session import SessionSetup, run_session
        from lifeguard.interpreter import resolve
        from lifeguard.model.outcomes import Outcome
        from lifeguard.report.escape import for_terminal
        from lifeguard.report.files import writable_folder
        from lifeguard.report.survey import Survey, needs_a_look, survey_table, write_survey_json, write_survey_page
        from lifeguard.survey.hooking import entry_point_hooks, read_hooks_file
        from lifeguard.survey.inventory import read_inventory, requirement_names
        from lifeguard.survey.limitations import read_limitations
        from lifeguard.survey.plan import survey_options, survey_scenarios
        from lifeguard.survey.repro import write_reproduction
        from lifeguard.survey.triage import triage

        names = list(args.packages)
        if args.requirements is not None:
            try:
                names += requirement_names(args.requirements.read_text(encoding="utf-8"), str(args.requirements))
            except OSError as exc:
                raise SurveyError(f"--requirements {args.requirements}: {exc.strerror or exc}") from None
        if bool(names) == bool(args.installed):
            raise SurveyError("name the packages (PACKAGE ..., --requirements FILE) or pass --installed, not both")
        interpreter = resolve(args.python)
        user = read_hooks_file(args.hooks) if args.hooks is not None else {}
        limitations = read_limitations()
        if args.limitations is not None:
            limitations += read_limitations(args.limitations)
        inventory = read_inventory(interpreter, names)
        if inventory.missing:
            for name in inventory.missing:
                print(f"lifeguard: error: {for_terminal(name)} is not installed in {interpreter.executable}",
                      file=sys.stderr)
            raise SurveyError(f"{len(inventory.missing)} of the packages named are not installed")
        declared, problems = entry_point_hooks(inventory.hooks)
        packages = self.packages(inventory.distributions, user, declared, bool(names), problems)
        probes = tuple(dict.fromkeys(args.probes or PROBES))
        report = (args.report or Path(tempfile.mkdtemp(prefix="lifeguard-survey-"))).resolve()
        writable_folder(report)
        scenarios, meaning = survey_scenarios([p for p in packages if p.targets], probes, report / "probes",
                                              args.timeout, repeat=args.repeat)
        if not scenarios:
            print("no extension module to probe in the packages surveyed")
            return EXIT_OK
        # Every run kept: a clean entry says what its runs did with the module (their records).
        setup = SessionSetup(interpreter, jobs=args.jobs, report_dir=report, native=not args.no_native,
                             keep_all_runs=True)
        session = run_session(scenarios, survey_options(native=not args.no_native), setup)
        entries = triage(session, meaning, limitations,
                         lambda probed, run: write_reproduction(report / "repro", probed, run, args.timeout))
        survey = Survey(session, tuple(packages), tuple(entries), probes, tuple(problems))
        write_survey_json(survey, report)
        write_survey_page(survey, report)
        print(survey_table(survey))
        for problem in problems:
            print(f"lifeguard: {for_terminal(problem)}")
        print(f"survey: {report / 'survey.json'}, {report / 'survey.html'}")
        if session.interrupted:
            return EXIT_INTERRUPTED
        if any(result.outcome is Outcome.ERROR for result in session.results):
            return EXIT_INTERNAL
        return EXIT_UNEXPECTED if needs_a_look(entries) else EXIT_OK

    @staticmethod
    def packages(distributions: tuple[dict[str, Any], ...], user: dict[str, HookChoice],
                 declared: dict[str, HookChoice], named: bool, problems: list[str]) -> list[Package]:
        """The surveyed packages with their targets and hooks; with --installed, only those with extensions."""
        from lifeguard.model.survey import Package
        from lifeguard.survey.hooking import hook_for
        from lifeguard.survey.targets import choose_targets

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
