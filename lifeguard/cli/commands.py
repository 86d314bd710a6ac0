"""One class per subcommand; its docstring is its help, ``add_arguments`` its options, ``run`` its work.

Options shared by several subcommands live in a base class (``Selecting`` for the scenario selection,
``Command.python_help`` for ``--python``), never copied between them.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from lifeguard import __version__
from lifeguard.cli.base import Command
from lifeguard.cli.options import (
    default_jobs,
    expectation_text,
    folder_path,
    jobs_value,
    perturbation_list,
    positive_float,
    positive_int,
    seed_value,
    shard_value,
    split_plain_target,
)
from lifeguard.cli.probe import Probe
from lifeguard.cli.survey import SurveyCommand
from lifeguard.errors import EXIT_OK, EXIT_USAGE, ArgumentError
from lifeguard.interpreter import resolve
from lifeguard.model.run import MODES
from lifeguard.model.scenario import DEFAULT_VARIANT, VARIANTS, Scenario, unique_selection
from lifeguard.plan.discover import PlainTarget, discover, is_plain_script, select
from lifeguard.plan.perturbations import PERTURBATIONS
from lifeguard.plan.scheduler import PlanOptions, build_all, series_of
from lifeguard.report.terminal import COLOR_CHOICES, COLOR_HELP
from lifeguard.run import headstart
from lifeguard.session.setup import SessionSetup, exit_code, run_session


class Selecting(Command):
    """A subcommand that works on a selection of scenarios."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("targets", nargs="*", metavar="TARGET",
                            help="scenario files, folders, FILE.py::NAME, bundled scenario names or plain scripts "
                                 "(default: the bundled scenarios); for run, a plain script takes every word after "
                                 "it as its arguments")
        parser.add_argument("-k", dest="keyword", metavar="EXPR",
                            help="only scenarios matching EXPR (substrings with and/or/not, as in pytest)")
        parser.add_argument("-c", dest="code", metavar="CODE", help="run CODE as a scenario that expects a clean pass")
        parser.add_argument("--variant", choices=(*VARIANTS, "default"), action="append",
                            help="only this variant (repeatable; default: every declared variant)")
        super().add_arguments(parser)

    @staticmethod
    def selection(args: argparse.Namespace, timeout: float | None = None) -> list[Scenario]:
        plain: PlainTarget | None = getattr(args, "plain", None)
        # A plain target works in the user's folder, as `python` would (the run folder keeps only evidence).
        found = discover(list(args.targets), code=args.code, timeout=timeout, plain=plain,
                         workdir=os.getcwd() if plain is not None else "")
        if args.keyword:
            found = select(found, args.keyword)
        if not found:
            raise ArgumentError("no scenario matches the selection")
        return unique_selection(found)  # one definition selected twice runs once; two that collide are refused

    @staticmethod
    def variants(args: argparse.Namespace) -> tuple[str, ...] | None:
        return tuple(args.variant) if args.variant else None


class Run(Selecting):
    """Run scenarios, or a program, in supervised children and judge them.

    Run each scenario x variant in fresh supervised children and compare the outcomes with the
    expectations; or run one program as Python runs it (script.py ARGS, -m MODULE ARGS, -c CODE ARGS)
    or any command (-- COMMAND ARGS), in the current folder, its output shown live: every word after
    the program is the program's, so lifeguard's options come first. Exit 0: all as expected; 1: some
    unexpected; 2: usage or environment error; 3: lifeguard failed; 130: interrupted. A program run
    alone that fails by its own exit code N (no crash, hang, corruption or leftover process) exits N.
    """

    name = "run"
    usage = ("lifeguard run [OPTIONS] [TARGET ...] [script.py | -m MODULE | -c CODE | -- COMMAND] [ARGS ...]\n"
             "       (every word after script.py, -m MODULE, -c CODE or -- COMMAND is the program's own)")

    def split(self, parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], PlainTarget | None]:
        return split_plain_target(parser, argv, is_plain_script)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("-m", dest="module", metavar="MODULE",
                            help="run library module MODULE as a program, as `python -m` does; the words after it "
                                 "are its arguments (also after script.py, -c CODE and -- COMMAND)")
        parser.add_argument("-q", "--quiet", action="store_true",
                            help="results only: no header, progress or live output of the program")
        parser.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                            help=COLOR_HELP)
        parser.add_argument("-x", "--exitfirst", action="store_true",
                            help="stop at the first unexpected verdict (runs already under way finish)")
        parser.add_argument("--repeat", type=positive_int, metavar="N", help="runs per scenario x variant "
                            "(default: each scenario's own repeat)")
        parser.add_argument("-j", "--jobs", type=jobs_value, default=default_jobs(), metavar="N",
                            help=f"runs in parallel, or 'auto' (default: the CPUs available, {default_jobs()} here)")
        parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                            help="deadline per run (default: each scenario's own)")
        parser.add_argument("--expect", type=expectation_text, metavar="OUTCOME[@PHASE]",
                            help="what a plain target must end in (default: passed), e.g. 'crashed@exit' or "
                                 "'hung@fork-child': a reproduction of a known bug then passes")
        parser.add_argument("--report", type=folder_path, metavar="DIR",
                            help="write results.jsonl (streamed), report.json, junit.xml and per-run evidence to DIR")
        parser.add_argument("--no-native", action="store_true",
                            help="skip native stacks (gdb on hangs, core files on crashes); faulthandler evidence only")
        parser.add_argument("--keep-cores", action="store_true",
                            help="keep the core files of crashed runs in their folders")
        parser.add_argument("--backtrace", choices=("core", "replay"), default="core",
                            help="native stacks of a crash from its core file (default; falls back to replay when "
                                 "the kernel pipes cores to a handler) or by rerunning the run under gdb ('replay')")
        parser.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
        stress = parser.add_argument_group("stress")
        stress.add_argument("--until-fail", action="store_true",
                            help="repeat each scenario x variant until its first failed run (capped by --repeat, "
                                 "--duration, or 1000 runs)")
        stress.add_argument("--duration", type=positive_float, metavar="SECONDS",
                            help="keep repeating every scenario x variant until SECONDS have passed")
        stress.add_argument("--seed", type=seed_value, metavar="N",
                            help="replay: run with this seed (printed for every failed run); one run unless --repeat")
        stress.add_argument("--shard", type=shard_value, metavar="K/N",
                            help="run shard K of N of the plan: a deterministic 1/N of its runs (each series' runs "
                                 "spread over the shards); `lifeguard merge` combines the shards' --report folders")
        stress.add_argument("--base-seed", type=seed_value, metavar="N",
                            help="derive every run's seed from N (default: random; with --shard, derived from the "
                                 "plan, so every shard agrees)")
        stress.add_argument("--scheduler", metavar="ADDRESS",
                            help="run on a Dask cluster: its scheduler's address (tcp://HOST:PORT); every worker "
                                 "supervises its runs as lifeguard does here (pip install 'lifeguard[dask]')")
        stress.add_argument("--perturb", type=perturbation_list, default=(), metavar="LIST",
                            help="comma-separated perturbations, or 'all': " + ", ".join(PERTURBATIONS))
        stress.add_argument("--mode", choices=MODES, default="auto",
                            help="how runs start: 'fresh' interpreter each run, 'fork-server' (forked from a warm "
                                 "server; exit-phase scenarios get full finalization), or 'auto' (fork-server for "
                                 "scenarios declaring fork_server=True that do not expect an exit-phase outcome). "
                                 "Default: auto")

    def run(self, args: argparse.Namespace) -> int:
        interpreter = resolve(args.python)
        scenarios = self.selection(args, args.timeout)
        if args.expect:
            scenarios = self.expecting(scenarios, args.expect)
        options = PlanOptions(repeat=args.repeat, timeout=args.timeout, variants=self.variants(args),
                              cores=not args.no_native, keep_cores=args.keep_cores, backtrace=args.backtrace,
                              until_fail=args.until_fail, duration=args.duration, seed=args.seed,
                              perturbations=args.perturb, mode=args.mode, exitfirst=args.exitfirst,
                              shard=args.shard, base_seed=headstart.base_seed(args.base_seed))
        several = sum(s.is_plain for s in scenarios) > 1 or (args.repeat or 1) > 1 or args.until_fail \
            or bool(args.duration)
        alone = bool(getattr(args, "plain", None)) and not args.expect and not several and len(scenarios) == 1
        setup = SessionSetup(interpreter, jobs=args.jobs, verbose=args.verbose, report_dir=args.report,
                             native=not args.no_native, quiet=args.quiet, live_prefix=several,
                             color=args.color, scheduler=args.scheduler, alone=alone)
        session = run_session(scenarios, options, setup)
        head = headstart.made()
        if args.verbose and head is not None:
            print(f"lifeguard: head start of {head.name}: {head.outcome}", file=sys.stderr)
        return exit_code(session, alone=alone)

    @staticmethod
    def expecting(scenarios: list[Scenario], expected: str) -> list[Scenario]:
        """Plain targets expect ``expected``; scenarios keep their own expectations."""
        if not any(s.is_plain for s in scenarios):
            raise ArgumentError("--expect applies to plain targets (script.py, -m, -c, -- COMMAND); scenarios "
                                "declare their own expectations in @lifeguard.scenario(expect=...)")
        return [replace(s, expect={DEFAULT_VARIANT: expected}) if s.is_plain else s for s in scenarios]


class List(Selecting):
    """List scenarios with their variants and expectations."""

    name = "list"
    python_help = "interpreter whose expectations to show"

    def run(self, args: argparse.Namespace) -> int:
        interpreter = resolve(args.python)
        for item in self.selection(args):
            variants = args.variant or item.variants
            expects = ", ".join(f"{v}: {item.expectation(v, interpreter.short_version)}"
                                for v in item.variants if v in variants)
            repeats = "/".join(str(item.repeat_for(v)) for v in item.variants if v in variants)
            fixture = f" fixture={item.fixture}" if item.fixture else ""
            print(f"{item.name}{fixture}  [{expects}]  repeat={repeats} timeout={item.timeout:g}s  ({item.where})")
            if item.description:
                print(f"    {item.description}")
        return EXIT_OK


class Build(Selecting):
    """Compile the fixtures of the selected scenarios."""

    name = "build"
    python_help = "interpreter to build for (default: this one)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--force", action="store_true", help="rebuild even when a cached build exists")

    def run(self, args: argparse.Namespace) -> int:
        interpreter = resolve(args.python)
        scenarios = [s for s in self.selection(args) if s.fixture]
        if not scenarios:
            print("no selected scenario uses a fixture")
            return EXIT_OK
        series = series_of(scenarios, PlanOptions(repeat=1, variants=self.variants(args)))

        def compiling(fixture: str, variant: str) -> None:
            print(f"compiling fixture {fixture} ({variant})...", flush=True)

        for (name, variant), built in sorted(build_all(series, interpreter, force=args.force,
                                                       on_compile=compiling).items()):
            state = "cached" if built.cached else "built"
            print(f"{name}[{variant}] {state}: {built.module_path}")
        return EXIT_OK


class Doctor(Command):
    """Check the native capture back ends (pystack, eu-stack, gdb), ptrace, core files, compiler and headers."""

    name = "doctor"
    python_help = "interpreter to check (default: this one)"

    def run(self, args: argparse.Namespace) -> int:
        from lifeguard.cli.doctor import run_checks  # capture back ends and their probes: only when asked

        interpreter = resolve(args.python)
        print(f"lifeguard {__version__}, Python {interpreter.version_text} ({interpreter.executable})")
        checks = run_checks(interpreter)
        for check in checks:
            print(check.line())
        return EXIT_USAGE if any(c.required and not c.ok for c in checks) else EXIT_OK


# The subcommands, in the order `lifeguard --help` lists them: adding one is a class and a line here.
class Merge(Command):
    """Combine the report folders of a plan's shards into one session's report.

    Reads each DIR written by `lifeguard run --shard K/N --report DIR`, checks that they are shards of one plan
    (the same plan, lifeguard version, interpreter and base seed, and one of each K), names the shards that
    are missing, and writes OUT as one session: results.jsonl, report.json (statistics and verdicts over every
    run), junit.xml, report.html, and every failed run's evidence under OUT/runs/. Exit 0: every merged verdict
    as expected; 1: some unexpected; 2: the folders are not the shards of one whole plan.
    """

    name = "merge"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("folders", nargs="+", type=Path, metavar="DIR", help="the shards' report folders")
        parser.add_argument("--report", type=folder_path, metavar="OUT", required=True,
                            help="the merged report folder (created; an earlier report in it is replaced)")
        parser.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                            help=COLOR_HELP)

    def run(self, args: argparse.Namespace) -> int:
        from lifeguard.report.merge import merge_shards  # only for this command

        return exit_code(merge_shards(args.folders, args.report, color=args.color))


COMMANDS: tuple[Command, ...] = (Run(), List(), Build(), Doctor(), Probe(), SurveyCommand(), Merge())
