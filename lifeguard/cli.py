"""``lifeguard`` command line: run, list, build."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from lifeguard import __version__
from lifeguard.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, LifeguardError
from lifeguard.perturb import PERTURBATIONS, parse_perturbations
from lifeguard.plan_modes import MODES
from lifeguard.scenarios import VARIANTS


class ArgumentError(LifeguardError):
    EXIT_CODE = EXIT_USAGE


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def seed_value(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 2**32-1")
    return value


def perturbation_list(text: str) -> tuple[str, ...]:
    try:
        return parse_perturbations(text)
    except LifeguardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2, with no traceback."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgumentError(f"{self.prog}: {message}")


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="scenario files, folders, FILE.py::NAME, bundled scenario names or plain scripts "
                             "(default: the bundled scenarios)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="only scenarios matching EXPR (substrings with and/or/not, as in pytest)")
    parser.add_argument("-c", dest="code", metavar="CODE", help="run CODE as a scenario that expects a clean pass")
    parser.add_argument("--variant", choices=(*VARIANTS, "default"), action="append",
                        help="only this variant (repeatable; default: every declared variant)")


def build_parser() -> Parser:
    parser = Parser(prog="lifeguard", description="Reproduce, catch and explain lifetime bugs in Python "
                    "native extensions: crashes at exit, deadlocks at fork, gc on the wrong thread.")
    parser.add_argument("--version", action="version", version=f"lifeguard {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    run = commands.add_parser("run", help="run scenarios in supervised children and judge them",
                              description="Run each scenario x variant in fresh supervised children and compare "
                              "the outcomes with the expectations. Exit 0: all as expected; 1: some unexpected; "
                              "2: usage or environment error; 3: lifeguard failed; 130: interrupted.")
    _add_selection(run)
    run.add_argument("--repeat", type=positive_int, metavar="N", help="runs per scenario x variant "
                     "(default: each scenario's own repeat)")
    run.add_argument("-j", "--jobs", type=positive_int, default=default_jobs(), metavar="N",
                     help=f"runs in parallel (default: the CPUs available, {default_jobs()} here)")
    run.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                     help="deadline per run (default: each scenario's own)")
    run.add_argument("--python", metavar="PATH", help="interpreter for the children (default: this one)")
    run.add_argument("--report", type=Path, metavar="DIR",
                     help="write results.jsonl (streamed), report.json, junit.xml and per-run evidence to DIR")
    run.add_argument("--no-native", action="store_true",
                     help="skip native stacks (gdb on hangs, core files on crashes); faulthandler evidence only")
    run.add_argument("--keep-cores", action="store_true", help="keep the core files of crashed runs in their folders")
    run.add_argument("--backtrace", choices=("core", "replay"), default="core",
                     help="native stacks of a crash from its core file (default; falls back to replay when the "
                          "kernel pipes cores to a handler) or by rerunning the run under gdb ('replay')")
    run.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
    stress = run.add_argument_group("stress")
    stress.add_argument("--until-fail", action="store_true",
                        help="repeat each scenario x variant until its first failed run (capped by --repeat, "
                             "--duration, or 1000 runs)")
    stress.add_argument("--duration", type=positive_float, metavar="SECONDS",
                        help="keep repeating every scenario x variant until SECONDS have passed")
    stress.add_argument("--seed", type=seed_value, metavar="N",
                        help="replay: run with this seed (printed for every failed run); one run unless --repeat")
    stress.add_argument("--perturb", type=perturbation_list, default=(), metavar="LIST",
                        help="comma-separated perturbations, or 'all': " + ", ".join(PERTURBATIONS))
    stress.add_argument("--mode", choices=MODES, default="auto",
                        help="how runs start: 'fresh' interpreter each run, 'fork-server' (forked from a warm "
                             "server; exit-phase scenarios get full finalization), or 'auto' (fork-server for "
                             "scenarios declaring fork_server=True that do not expect an exit-phase outcome). "
                             "Default: auto")

    lister = commands.add_parser("list", help="list scenarios with their variants and expectations")
    _add_selection(lister)
    lister.add_argument("--python", metavar="PATH", help="interpreter whose expectations to show")

    build = commands.add_parser("build", help="compile the fixtures of the selected scenarios")
    _add_selection(build)
    build.add_argument("--python", metavar="PATH", help="interpreter to build for (default: this one)")
    build.add_argument("--force", action="store_true", help="rebuild even when a cached build exists")
    doctor = commands.add_parser("doctor", help="check gdb, ptrace, core files, compiler and headers")
    doctor.add_argument("--python", metavar="PATH", help="interpreter to check (default: this one)")

    probe = commands.add_parser("probe", help="probe an extension module for lifetime bugs (exit, fork, gc-thread)")
    from lifeguard import probes

    probes.add_arguments(probe)
    return parser


def _select(args: argparse.Namespace, timeout: float | None = None) -> list:
    from lifeguard.discover import discover, select

    found = discover(list(args.targets), code=args.code, timeout=timeout)
    if args.keyword:
        found = select(found, args.keyword)
    if not found:
        raise ArgumentError("no scenario matches the selection")
    return found


def cmd_run(args: argparse.Namespace) -> int:
    from lifeguard.engine import Engine
    from lifeguard.interpreter import resolve
    from lifeguard.plan import PlanOptions
    from lifeguard.report import ReportDirSink, TerminalSink
    from lifeguard.supervise import CaptureHook

    interp = resolve(args.python)
    scenarios = _select(args, args.timeout)
    sinks: list = [TerminalSink(verbose=args.verbose)]
    runs_dir = None
    if args.report:
        args.report = args.report.resolve()  # children run in their own folders: relative paths would break
        args.report.mkdir(parents=True, exist_ok=True)
        sinks.append(ReportDirSink(args.report))
        runs_dir = args.report / "runs"
    hooks: tuple[CaptureHook, ...] = ()
    if not args.no_native:
        from lifeguard.native import native_capture_hooks

        hooks = native_capture_hooks()
    engine = Engine(interp, jobs=args.jobs, sinks=sinks, capture_hooks=hooks, runs_dir=runs_dir)
    options = PlanOptions(repeat=args.repeat, timeout=args.timeout,
                          variants=tuple(args.variant) if args.variant else None,
                          cores=not args.no_native, keep_cores=args.keep_cores, backtrace=args.backtrace,
                          until_fail=args.until_fail,
                          duration=args.duration, seed=args.seed, perturbations=args.perturb, mode=args.mode)
    session = engine.run(scenarios, options)
    if session.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if session.all_expected else EXIT_UNEXPECTED


def cmd_list(args: argparse.Namespace) -> int:
    from lifeguard.interpreter import resolve

    interp = resolve(args.python)
    for item in _select(args):
        variants = args.variant or item.variants
        expects = ", ".join(f"{v}: {item.expectation(v, interp.short_version)}"
                            for v in item.variants if v in variants)
        repeats = "/".join(str(item.repeat_for(v)) for v in item.variants if v in variants)
        fixture = f" fixture={item.fixture}" if item.fixture else ""
        print(f"{item.name}{fixture}  [{expects}]  repeat={repeats} timeout={item.timeout:g}s  ({item.where})")
        if item.description:
            print(f"    {item.description}")
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from lifeguard.interpreter import resolve
    from lifeguard.plan import PlanOptions, build_all, series_of

    interp = resolve(args.python)
    scenarios = [s for s in _select(args) if s.fixture]
    if not scenarios:
        print("no selected scenario uses a fixture")
        return EXIT_OK
    series = series_of(scenarios, PlanOptions(repeat=1, variants=tuple(args.variant) if args.variant else None))
    for (name, variant), built in sorted(build_all(series, interp, force=args.force).items()):
        state = "cached" if built.cached else "built"
        print(f"{name}[{variant}] {state}: {built.module_path}")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from lifeguard.doctor import run_checks
    from lifeguard.interpreter import resolve

    interp = resolve(args.python)
    print(f"lifeguard {__version__}, Python {interp.version_text} ({interp.executable})")
    checks = run_checks(interp)
    for check in checks:
        print(check.line())
    return EXIT_USAGE if any(c.required and not c.ok for c in checks) else EXIT_OK


def cmd_probe(args: argparse.Namespace) -> int:
    from lifeguard import probes

    return probes.cli_main(args)


COMMANDS = {"run": cmd_run, "list": cmd_list, "build": cmd_build, "doctor": cmd_doctor, "probe": cmd_probe}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # SIGTERM (CI cancelling the job) is handled like Ctrl-C: kill every child, keep what finished.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return COMMANDS[args.command](args)
    except LifeguardError as exc:
        print(f"lifeguard: error: {exc}", file=sys.stderr)
        if exc.HELP_TEXT:
            print(f"lifeguard: {exc.HELP_TEXT}", file=sys.stderr)
        return exc.EXIT_CODE
    except KeyboardInterrupt:
        print("lifeguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception:
        import traceback

        traceback.print_exc()
        print("lifeguard: internal error (a bug in lifeguard); please report it with the traceback above",
              file=sys.stderr)
        return EXIT_INTERNAL


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
