"""``lifeguard survey``: probe the compiled packages of an environment and triage what fails."""

from __future__ import annotations

import argparse
from pathlib import Path

from lifeguard.cli.base import Command
from lifeguard.cli.options import folder_path, positive_float, positive_int
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED, SurveyError
from lifeguard.model.survey import CANDIDATE, SUITE_SESSIONS
from lifeguard.plan.probes import PROBES

SURVEY_TIMEOUT = 30.0  # per run: a survey's packages start slower than a user's own small module
SUITE_BUDGET = 600.0  # per package, with --tests
SUITE_TEST_TIMEOUT = 20.0  # with --tests: each test's deadline (a hang costs it), unless --timeout says


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
        parser.add_argument("--probe", dest="probes", action="append", metavar="MODE",
                            help=f"run only this probe mode (repeatable; default: all of them): {', '.join(PROBES)}; "
                                 f"with --tests: {', '.join(SUITE_SESSIONS)}")
        parser.add_argument("--hooks", type=Path, metavar="FILE",
                            help="a Python file: HOOKS = {'distribution': function, ...} (each called as "
                                 "function(module)), and optionally MODULES = {'distribution': ['module', ...]}")
        parser.add_argument("--limitations", type=Path, metavar="FILE",
                            help="more documented limitations, in the format of lifeguard's limitations.json")
        parser.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N",
                            help="runs in parallel (default 1)")
        parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                            help=f"deadline per run (default {SURVEY_TIMEOUT:g}; with --tests, each test's: default "
                                 f"{SUITE_TEST_TIMEOUT:g})")
        parser.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                            help="runs per package x module x mode (default 1; a race may need several)")
        parser.add_argument("--no-native", action="store_true",
                            help="skip native stacks (gdb on hangs, core files on crashes)")
        tests = parser.add_argument_group("test suites (--tests)")
        tests.add_argument("--tests", action="store_true",
                           help="exercise each package with its own test suite instead of a hook: its tests run "
                                "plainly, then under pytest --lifeguard once per probe (exit, fork-finalize, "
                                "fork-rerun, gc-thread, gc-cycle: see pytest --help, --lifeguard-probe); a test "
                                "that passes plainly and fails only under a probe is a candidate, with a standalone "
                                "reproduction checked by running it. Writes DIR/suites.json")
        tests.add_argument("--tests-from", type=Path, metavar="DIR",
                           help="the tests of the (one) package named are in DIR (default: those installed with it, "
                                "else its source distribution for the installed version, fetched with pip)")
        tests.add_argument("--budget", type=positive_float, default=SUITE_BUDGET, metavar="SECONDS",
                           help=f"time per package (default {SUITE_BUDGET:g}); a suite too long for it is sampled "
                                "evenly over its modules, and the table says how many tests ran")
        tests.add_argument("--install-test-deps", action="store_true",
                           help="install pytest and what the suite's requirement files name into the target "
                                "environment (default: use what is installed)")

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
        if args.tests:
            return self._run_tests(args, names)
        if args.tests_from is not None or args.install_test_deps:
            raise SurveyError("--tests-from and --install-test-deps go with --tests")
        unknown = [probe for probe in args.probes or () if probe not in PROBES]
        if unknown:
            raise SurveyError(f"--probe {unknown[0]}: choose from {', '.join(PROBES)}")
        probes = tuple(dict.fromkeys(args.probes or PROBES))
        request = SurveyRequest(resolve(args.python), tuple(names), args.report, probes, args.timeout or SURVEY_TIMEOUT,
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

    def _run_tests(self, args: argparse.Namespace, names: list[str]) -> int:
        """``--tests``: the packages' own test suites under the test-suite probes."""
        import tempfile

        from lifeguard.interpreter import resolve
        from lifeguard.report.files import claim_report_folder
        from lifeguard.session.suite_survey import SuiteRequest, suites_table, survey_suites
        from lifeguard.survey.inventory import read_inventory

        unknown = [probe for probe in args.probes or () if probe not in SUITE_SESSIONS]
        if unknown:
            raise SurveyError(f"--probe {unknown[0]}: with --tests choose from {', '.join(SUITE_SESSIONS)}")
        if args.tests_from is not None and len(names) != 1:
            raise SurveyError("--tests-from DIR holds the tests of one package: name exactly one")
        interpreter = resolve(args.python)
        inventory = read_inventory(interpreter, names)
        if inventory.missing:
            raise SurveyError(f"{', '.join(inventory.missing)} not installed in {interpreter.executable}")
        packages = tuple((str(d["name"]), str(d["version"])) for d in inventory.distributions
                         if names or d["extensions"])
        report = (args.report or Path(tempfile.mkdtemp(prefix="lifeguard-survey-"))).resolve()
        claim_report_folder(report)
        request = SuiteRequest(interpreter, packages, report, tuple(dict.fromkeys(args.probes or SUITE_SESSIONS)),
                               timeout=args.timeout or SUITE_TEST_TIMEOUT,
                               budget=args.budget, tests_from=args.tests_from,
                               install_test_deps=args.install_test_deps, limitations_file=args.limitations)
        done = survey_suites(request, progress=lambda line: print(f"lifeguard: {line}", flush=True))
        print(suites_table(done, request.probes))
        print(f"survey: {report / 'suites.json'}, {report / 'suites.html'}")
        return EXIT_UNEXPECTED if any(item.problem or any(c.verdict == CANDIDATE for c in item.candidates)
                                      for item in done) else EXIT_OK
