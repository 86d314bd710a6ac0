"""Probes for users' own extension modules: exit, fork and gc-thread.

A probe is a generated scenario: a small file that imports the module, drives
it through the user's hook (``--hook FILE.py:FUNC``, called as ``FUNC(module)``)
and exits normally, run through the engine like any scenario, under ``-X dev``
and ``PYTHONMALLOC=debug`` so a use-after-free shows. Each probe expects a clean
pass; anything else is a bug found, with its evidence and findings.

- ``exit``: what the hook made stays alive until the interpreter finalizes
  (the onnxruntime static pool that released Python objects after Py_Finalize);
- ``fork``: with the module's threads running, fork; the child uses the module
  and exits, the parent waits (MXNet's pool that deadlocked fork());
- ``gc-thread``: what the hook returns dies in reference cycles collected on
  a foreign thread while the main thread keeps calling the hook (TVM Disco's
  DRef freed by a server thread mid-write).

This module is imported to build the CLI's parser: module-level imports stay
at argparse; the rest is imported where it is used.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from lifeguard.engine import Session, Sink
    from lifeguard.interpreter import Interpreter
    from lifeguard.scenarios import Scenario
    from lifeguard.supervise import CaptureHook

PROBES: dict[str, str] = {
    "exit": "use the module, keep what it made, exit through normal finalization",
    "fork": "fork while the module's threads run; the child uses the module and exits",
    "gc-thread": "the module's objects are collected on a foreign thread while the owner uses the module",
}
# Interpreter conditions of every probe run (names from lifeguard.perturb).
PROBE_PERTURBATIONS = ("dev-mode", "malloc-debug")
DEFAULT_TIMEOUT = 20.0
# The gc-thread probe calls the hook this many times at most, for this long at most.
GC_ROUNDS = 200
GC_SECONDS = 1.0
BODY_FUNCTIONS = {"exit": "probe_exit", "fork": "probe_fork", "gc-thread": "probe_gc_thread"}

HOOK_HELP = ("FUNC(module) exercises the module: start its threads, make its objects. The exit probe keeps "
             "what it returns alive until exit; the gc-thread probe drops it on a reference cycle for the "
             "collector thread; the fork probe calls it before fork, in the child and in the parent")
CHECK_HELP = ("FUNC(module) runs last, on the main thread: raise, or call lifeguard.child.report_corruption(), "
              "to report broken state only the module can see")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``lifeguard probe``."""
    from lifeguard.cli import positive_float, positive_int

    parser.description = ("Probe an importable extension module for lifetime bugs: exit (finalization with "
                          "its objects alive), fork (with its threads running), gc-thread (its objects "
                          "collected on a foreign thread). Every probe runs in fresh supervised children under "
                          "-X dev and PYTHONMALLOC=debug and expects a clean pass. Exit 0: no probe found a "
                          "problem; 1: some probe did; 2: usage error or the module cannot be imported.")
    parser.add_argument("module", metavar="MODULE", help="the extension module to probe, as you import it "
                        "(e.g. mypkg._native)")
    parser.add_argument("--probe", dest="probes", action="append", choices=tuple(PROBES),
                        help="run only this probe (repeatable; default: all of them)")
    parser.add_argument("--hook", metavar="FILE.py:FUNC", help=HOOK_HELP)
    parser.add_argument("--check", metavar="FILE.py:FUNC", help=CHECK_HELP)
    parser.add_argument("--path", dest="paths", action="append", default=[], metavar="DIR",
                        help="put DIR on the children's import path (repeatable; the current folder always is)")
    parser.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"deadline per run (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="runs per probe (default 1)")
    parser.add_argument("-j", "--jobs", type=positive_int, default=1, metavar="N", help="runs in parallel (default 1)")
    parser.add_argument("--python", metavar="PATH", help="interpreter for the children (default: this one)")
    parser.add_argument("--report", metavar="DIR", help="write results.jsonl, report.json, junit.xml, "
                        "per-run evidence and the generated probe file to DIR")
    parser.add_argument("--no-native", action="store_true",
                        help="skip native stacks (gdb on hangs, core files on crashes)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")


def parse_hook(text: str, option: str) -> dict[str, Any]:
    """``FILE.py:FUNC`` -> a callable spec for the child; checked here (read, never run)."""
    import ast
    import os

    from lifeguard.errors import UsageError

    path, sep, name = text.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"{option} {text!r}: expected FILE.py:FUNC")
    if not os.path.isfile(path):
        raise UsageError(f"{option} {text!r}: no such file {path}")
    try:
        tree = ast.parse(open(path, "rb").read(), filename=path)
    except SyntaxError as exc:
        raise UsageError(f"{option} {text!r}: {path}:{exc.lineno}: syntax error: {exc.msg}") from None
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    defined |= {target.id for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    if name not in defined:
        raise UsageError(f"{option} {text!r}: {path} defines no function {name!r}")
    return {"path": os.path.abspath(path), "qualname": name, "module_name": None, "sys_path": []}


def callable_spec(func: Callable[..., Any], what: str) -> dict[str, Any]:
    """A module-level function of the caller's process, described so the child can import it the same way."""
    import os
    import sys

    from lifeguard.errors import UsageError

    code = getattr(func, "__code__", None)
    qualname = getattr(func, "__qualname__", "")
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    if code is None or "<" in qualname or module is None or not getattr(module, "__file__", None):
        raise UsageError(f"{what} must be a module-level function defined in a file, got {func!r}")
    return {"path": os.path.abspath(code.co_filename), "qualname": qualname, "module_name": module.__name__,
            "sys_path": parent_sys_path()}


def parent_sys_path() -> list[str]:
    """This process's import path, absolute, for a child that must import what this one can."""
    import os
    import sys

    return [os.path.abspath(entry or os.getcwd()) for entry in sys.path]


PROBE_FILE_TEMPLATE = '''"""Generated by lifeguard: the {kinds} probe(s) of {module}."""

from lifeguard import probe_child

CONFIG = {config}

_probe = probe_child.Probe(CONFIG)
'''

PROBE_FUNCTION_TEMPLATE = '''

def {function}() -> None:
    """{description}"""
    _probe.{method}()
'''


def write_probe_file(folder: Path, module: str, kinds: Sequence[str], *, hook: dict[str, Any] | None,
                     check: dict[str, Any] | None, paths: Sequence[str], timeout: float) -> tuple[Path, dict[str, int]]:
    """The generated scenario file, and the line of each probe's body in it."""
    import pprint
    import re

    config = {"module": module, "hook": hook, "check": check, "paths": list(paths), "timeout": timeout,
              "gc_rounds": GC_ROUNDS, "gc_seconds": GC_SECONDS}
    text = PROBE_FILE_TEMPLATE.format(kinds=", ".join(kinds), module=module,
                                       config=pprint.pformat(config, indent=4, width=100))
    lines: dict[str, int] = {}
    for kind in kinds:
        function = BODY_FUNCTIONS[kind]
        lines[kind] = text.count("\n") + 3  # the template starts with two empty lines
        text += PROBE_FUNCTION_TEMPLATE.format(function=function, description=PROBES[kind],
                                               method=function.removeprefix("probe_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"probe_{re.sub(r'[^A-Za-z0-9_]', '_', module)}.py"
    path.write_text(text, encoding="utf-8")
    return path, lines


def probe_scenarios(module: str, kinds: Sequence[str], folder: Path, *, hook: dict[str, Any] | None = None,
                    check: dict[str, Any] | None = None, paths: Sequence[str] = (),
                    timeout: float = DEFAULT_TIMEOUT, repeat: int = 1) -> list[Scenario]:
    """One scenario per probe kind, all in one generated file under ``folder``."""
    from lifeguard.errors import UsageError
    from lifeguard.scenarios import DEFAULT_VARIANT, Scenario

    unknown = [kind for kind in kinds if kind not in PROBES]
    if unknown or not kinds:
        raise UsageError(f"unknown probe {', '.join(unknown) or '(none)'} (choose from {', '.join(PROBES)})")
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"{module!r} is not a module name (e.g. mypkg._native)")
    path, lines = write_probe_file(folder, module, kinds, hook=hook, check=check, paths=paths, timeout=timeout)
    return [Scenario(name=f"probe-{kind}[{module}]", function=BODY_FUNCTIONS[kind], path=str(path),
                     line=lines[kind], fixture=None, expect={DEFAULT_VARIANT: "passed"}, timeout=timeout,
                     repeat={"*": repeat}, description=f"{kind} probe: {PROBES[kind]}", kind="function",
                     replay="")
            for kind in dict.fromkeys(kinds)]


def run_probes(module: str, kinds: Sequence[str], interpreter: Interpreter, folder: Path, *,
               hook: dict[str, Any] | None = None, check: dict[str, Any] | None = None,
               paths: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT, repeat: int = 1, jobs: int = 1,
               sinks: Sequence[Sink] = (), capture_hooks: tuple[CaptureHook, ...] = (),
               runs_dir: Path | None = None, native: bool = True) -> Session:
    """Run the probes through the engine (the one the CLI and the plugin share)."""
    from lifeguard.engine import Engine
    from lifeguard.plan import PlanOptions

    scenarios = probe_scenarios(module, kinds, folder, hook=hook, check=check, paths=paths,
                                timeout=timeout, repeat=repeat)
    engine = Engine(interpreter, jobs=jobs, sinks=sinks, capture_hooks=capture_hooks, runs_dir=runs_dir)
    options = PlanOptions(perturbations=PROBE_PERTURBATIONS, mode="fresh", cores=native)
    return engine.run(scenarios, options)


def module_missing(session: Session, module: str) -> str | None:
    """The import error when no probe could even import ``module``, else None."""
    from lifeguard.outcomes import Outcome, Phase

    if not session.results:
        return None
    for result in session.results:
        if result.outcome is not Outcome.FAILED or result.phase is not Phase.IMPORT:
            return None
        if "ModuleNotFoundError" not in result.stderr_tail and "ImportError" not in result.stderr_tail:
            return None
    lines = [line for line in session.results[0].stderr_tail.splitlines() if "Error" in line]
    return lines[-1].strip() if lines else f"cannot import {module}"


def cli_main(args: argparse.Namespace) -> int:
    """``lifeguard probe``: run the chosen probes, print verdicts and evidence."""
    import os
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from lifeguard.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE
    from lifeguard.interpreter import resolve
    from lifeguard.report import ReportDirSink, TerminalSink

    interpreter = resolve(args.python)
    hook = parse_hook(args.hook, "--hook") if args.hook else None
    check = parse_hook(args.check, "--check") if args.check else None
    paths = [os.getcwd(), *(os.path.abspath(p) for p in args.paths)]
    kinds = tuple(dict.fromkeys(args.probes or PROBES))
    sinks: list[Any] = [TerminalSink(verbose=args.verbose)]
    runs_dir = None
    if args.report:
        report = Path(args.report).resolve()  # the children run in their own folders: no relative paths
        report.mkdir(parents=True, exist_ok=True)
        sinks.append(ReportDirSink(report))
        runs_dir = report / "runs"
        folder = report / "probe"
    else:
        folder = Path(tempfile.mkdtemp(prefix="lifeguard-probe-"))
    capture_hooks: tuple[Any, ...] = ()
    if not args.no_native:
        from lifeguard.native import native_capture_hooks

        capture_hooks = native_capture_hooks()
    try:
        session = run_probes(args.module, kinds, interpreter, folder, hook=hook, check=check, paths=paths,
                             timeout=args.timeout, repeat=args.repeat, jobs=args.jobs, sinks=sinks,
                             capture_hooks=capture_hooks, runs_dir=runs_dir, native=not args.no_native)
    finally:
        if not args.report:
            shutil.rmtree(folder, ignore_errors=True)
    if session.interrupted:
        return EXIT_INTERRUPTED
    missing = module_missing(session, args.module)
    if missing:
        print(f"lifeguard: error: cannot import {args.module} in the child: {missing}", file=sys.stderr)
        print("lifeguard: put its folder on the import path with --path DIR, or pick the interpreter "
              "it is installed in with --python", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK if session.all_expected else EXIT_UNEXPECTED
