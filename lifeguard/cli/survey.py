"""``lifeguard survey``: probe the compiled packages of an environment and triage what fails."""

from __future__ import annotations

import argparse
from pathlib import Path

from lifeguard.cli.base import Command
from lifeguard.cli.options import folder_path, positive_float, positive_int
from lifeguard.errors import EXIT_OK, SurveyError
from lifeguard.plan.probes import PROBES

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
        parser.add_argument("--report", type=folder_path, metavar="DIR", help="write survey.json, survey.html, "
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
        from lifeguard.interpreter import resolve
        from lifeguard.report.escape import for_terminal
        from lifeguard.report.survey import survey_table
        from lifeguard.session.survey import SurveyRequest, run_survey, survey_exit_code
        from lifeguard.survey.inventory import requirement_names

        names = list(args.packages)
        if args.requirements is not None:
            try:
                names += requirement_names(args.requirements.read_text(encoding="utf-8"), str(args.requirements))
            except OSError as exc:
                raise SurveyError(f"--requirements {args.requirements}: {exc.strerror or exc}") from None
        if bool(names) == bool(args.installed):
            raise SurveyError("name the packages (PACKAGE ..., --requirements FILE) or pass --installed, not both")
        probes = tuple(dict.fromkeys(args.probes or PROBES))
        request = SurveyRequest(resolve(args.python), tuple(names), args.report, probes, args.timeout,
                                hooks_file=args.hooks, limitations_file=args.limitations, repeat=args.repeat,
                                jobs=args.jobs, native=not args.no_native)
        done = run_survey(request)
        if done.survey is None:
            print("no extension module to probe in the packages surveyed")
            return EXIT_OK
        print(survey_table(done.survey))
        for problem in done.survey.problems:
            print(f"lifeguard: {for_terminal(problem)}")
        print(f"survey: {done.report / 'survey.json'}, {done.report / 'survey.html'}")
        return survey_exit_code(done.survey)
