"""`lifeguard probe`: an extension module's lifetime probes, and what each did with the module."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lifeguard.cli.base import Command
from lifeguard.cli.options import folder_path, positive_float, positive_int
from lifeguard.errors import EXIT_USAGE
from lifeguard.interpreter import resolve
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Session
from lifeguard.plan.probes import DEFAULT_TIMEOUT as PROBE_TIMEOUT
from lifeguard.plan.probes import (
    PROBE_ALIASES,
    PROBES,
    bugs_seen,
    module_not_found,
    parse_hook,
    probe_kind,
    probe_options,
    probe_records,
    probe_scenarios,
    probe_verdict,
)
from lifeguard.report.escape import for_terminal
from lifeguard.session.setup import SessionSetup, exit_code, run_session

HOOK_HELP = ("FUNC(module) or FUNC(module, probe) exercises the module: start its threads, make its objects, "
             "hand it callbacks made by probe.callback(*objects). The exit probe keeps what it returns alive until "
             "exit; the gc probes drop it on a reference cycle; the fork probes call it before fork (fork-use: "
             "in the child and in the parent too)")
CHECK_HELP = ("FUNC(module) runs last, on the main thread: raise, or call lifeguard.child.report_corruption(), "
              "to report broken state only the module can see")


class Probe(Command):
    """Probe an extension module for lifetime bugs (exit, fork-use, fork-finalize, fork-exit, gc-thread, gc-cycle).

    Probe an importable extension module for lifetime bugs: exit (finalization with its objects and
    callbacks alive), fork-use (fork with its threads running, the child uses it; "fork" is accepted),
    fork-finalize (the child only finalizes what it inherited), fork-exit (the child leaves with
    os._exit: only atfork handlers run), gc-thread (its objects collected on a foreign thread), gc-cycle
    (collected in cycles on the main thread). Every probe runs in fresh supervised children under -X dev
    and PYTHONMALLOC=debug, a hung run ends once its every thread has been blocked for 2 s, and expects
    a clean pass; each probe says what it did with the module (calls, objects, threads, forks), and one
    whose hook used nothing of it is "not exercised", never clean. Exit 0: every probe exercised the
    module and found no problem; 1: some probe found one, or exercised nothing; 2: usage error or the
    module cannot be imported.
    """

    name = "probe"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("module", metavar="MODULE", help="the extension module to probe, as you import it "
                            "(e.g. mypkg._native)")
        parser.add_argument("--probe", dest="probes", action="append", choices=(*PROBES, *PROBE_ALIASES),
                            help="run only this probe (repeatable; default: all of them; fork is fork-use)")
        parser.add_argument("--hook", metavar="FILE.py:FUNC", help=HOOK_HELP)
        parser.add_argument("--check", metavar="FILE.py:FUNC", help=CHECK_HELP)
        parser.add_argument("--path", dest="paths", action="append", default=[], metavar="DIR",
                            help="put DIR on the children's import path (repeatable; the current folder always is)")
        parser.add_argument("--timeout", type=positive_float, default=PROBE_TIMEOUT, metavar="SECONDS",
                            help=f"deadline per run (default {PROBE_TIMEOUT:g})")
        parser.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="runs per probe (default 1)")
        parser.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N",
                            help="runs in parallel (default 1)")
        super().add_arguments(parser)
        parser.add_argument("--report", type=folder_path, metavar="DIR",
                            help="write results.jsonl, report.json, junit.xml, per-run evidence and the generated "
                                 "probe file to DIR")
        parser.add_argument("--no-native", action="store_true",
                            help="skip native stacks (gdb on hangs, core files on crashes)")
        parser.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")

    def run(self, args: argparse.Namespace) -> int:
        interpreter = resolve(args.python)
        hook = parse_hook(args.hook, "--hook") if args.hook else None
        check = parse_hook(args.check, "--check") if args.check else None
        paths = [os.getcwd(), *(os.path.abspath(p) for p in args.paths)]
        kinds = tuple(dict.fromkeys(probe_kind(name) for name in args.probes or PROBES))
        unknown = module_not_found(interpreter.executable, args.module, paths)
        if unknown is not None:  # said at once, as python says it, not after six probes' tracebacks
            _cannot_import(args.module, unknown)
            return EXIT_USAGE
        report = args.report.resolve() if args.report is not None else None
        if report is not None:
            from lifeguard.report.files import claim_report_folder  # the report writers: only when asked

            claim_report_folder(report)  # before the probe file goes there: a file or a read-only folder in one line
        folder = report / "probe" if report else Path(tempfile.mkdtemp(prefix="lifeguard-probe-"))
        try:
            scenarios = probe_scenarios(args.module, kinds, folder, hook=hook, check=check, paths=paths,
                                        timeout=args.timeout, repeat=args.repeat)
            setup = SessionSetup(interpreter, jobs=args.jobs, verbose=args.verbose, report_dir=report,
                                 native=not args.no_native, keep_all_runs=True)
            session = run_session(scenarios, probe_options(native=not args.no_native), setup)
        finally:
            if report is None:
                shutil.rmtree(folder, ignore_errors=True)
        missing = None if session.interrupted else module_missing(session, args.module)
        if missing:
            _cannot_import(args.module, missing)
            return EXIT_USAGE
        print_exercised(session, args.module)
        return exit_code(session)


def _cannot_import(module: str, why: str) -> None:
    print(f"lifeguard: error: cannot import {module} in the child: {for_terminal(why)}", file=sys.stderr)
    print("lifeguard: put its folder on the import path with --path DIR, or pick the interpreter "
          "it is installed in with --python", file=sys.stderr)


def print_exercised(session: Session, module: str) -> None:
    """Each probe's verdict and what its runs did with the module (the first run's record, and how many of the
    series' runs exercised it)."""
    if not session.summaries:
        return
    print(f"\nwhat each probe did with {module}:")
    kinds = [s.scenario.partition("[")[0].removeprefix("probe-") for s in session.summaries]
    width = max(map(len, kinds))
    for summary, kind in zip(session.summaries, kinds, strict=True):
        records = probe_records(session.results, summary.scenario)
        verdict = probe_verdict(summary, records)
        did = records[0].text() if records else "its hook never returned: nothing recorded"
        if len(records) > 1:
            did += f" (run 1; {sum(r.exercised for r in records)} of {len(records)} runs exercised it)"
        print(f"  {kind:<{width}}  {verdict:<15} {for_terminal(did)}")
    bugs = bugs_seen(session.results)
    if bugs:
        print(f"\n{len(bugs)} problem(s) found, each once with the probes that saw it:")
        for problem, probes in bugs:
            print(f"  {for_terminal(problem)}\n    seen by {len(probes)} probe(s): {', '.join(probes)}")


def module_missing(session: Session, module: str) -> str | None:
    """The import error when no probe could even import ``module``, else None."""
    if not session.results or any(set(s.counts) != {Outcome.FAILED.value} for s in session.summaries):
        return None  # nothing failed, or some run did not fail (only failed runs are kept)
    for result in session.results:
        if result.outcome is not Outcome.FAILED or result.phase is not Phase.IMPORT:
            return None
        if "ModuleNotFoundError" not in result.stderr_tail and "ImportError" not in result.stderr_tail:
            return None
    lines = [line for line in session.results[0].stderr_tail.splitlines() if "Error" in line]
    return lines[-1].strip() if lines else f"cannot import {module}"
