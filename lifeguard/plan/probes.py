"""Probes for users' own extension modules: one generated scenario per probe mode.

A probe is a generated scenario: a small file that imports the module, drives it through the user's hook
(``--hook FILE.py:FUNC``, called as ``FUNC(module)`` or ``FUNC(module, probe)`` with the run's
``lifeguard.child.probe.ProbeContext``) and exits normally, run through the engine like any scenario, under
``-X dev`` and ``PYTHONMALLOC=debug`` so a use-after-free shows, with early hang detection on. Each probe
expects a clean pass; anything else is a bug found, with its evidence and findings. A clean pass is earned: each
run records what its hook did with the module (probe_records), and a run whose hook used nothing of it fails as
``not exercised`` (lifeguard.child.probe, protocol.not_exercised), never passes. The modes keep causes apart:

- ``exit``: what the hook made, and the callbacks it handed to native code, stay alive until the interpreter
  finalizes (the onnxruntime static pool that released Python objects after Py_Finalize);
- ``fork-use`` (``fork`` on the command line too): once the hook's threads have run, fork FORKS times at random
  moments over FORK_WINDOW seconds, one child at a time; each child uses the module and exits normally
  (MXNet's pool; a library that documents it is not fork-safe fails here only). The other fork probes fork so too;
- ``fork-finalize``: fork; the child never calls the module, it only drops what it inherited and finalizes:
  destructors that join or lock what a parent's thread owns hang here;
- ``fork-exit``: fork; the child leaves with ``os._exit(0)``: only the atfork handlers run in it;
- ``gc-thread``: after a warm-up call on the main thread, what the hook returns dies in reference cycles
  collected on a foreign thread while the main thread keeps calling the hook (TVM Disco's DRef);
- ``gc-cycle``: the same cycles, collected on the main thread (tp_clear before the destructor).

The forked child gets a deadline of its own, FORK_CHILD_SHARE of the run's: past it the parent notes so and
keeps waiting, so the supervisor captures the hung child (phase ``fork-child``) instead of losing it.
The command (lifeguard.cli) and the plugin's fixture run these scenarios with ``probe_options()`` through the
one session builder.
"""

from __future__ import annotations

import ast
import os
import pprint
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lifeguard.child import protocol
from lifeguard.child.fork_schedule import FORK_WINDOW, FORKS
from lifeguard.errors import UsageError
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import RunResult, SeriesSummary
from lifeguard.model.run import RunKind
from lifeguard.model.scenario import DEFAULT_VARIANT, Scenario
from lifeguard.model.survey import NOT_EXERCISED, ForkSeen, ProbeRecord, ThreadSeen
from lifeguard.plan.scheduler import PlanOptions

PROBES: dict[str, str] = {
    "exit": "use the module, keep what it made and the callbacks it holds, exit through normal finalization",
    "fork-use": "fork while the module's threads run; the child uses the module and exits normally",
    "fork-finalize": "fork; the child only drops the inherited objects and exits through normal finalization",
    "fork-exit": "fork; the child leaves at once with os._exit(0): only the atfork handlers run",
    "gc-thread": "the module's objects are collected on a foreign thread while the owner uses the module",
    "gc-cycle": "the module's objects are dropped in reference cycles collected on the main thread",
}
# Older names still accepted (the command line, the fixture): "fork" was the fork-use probe.
PROBE_ALIASES: dict[str, str] = {"fork": "fork-use"}
BODY_FUNCTIONS: dict[str, str] = {
    "exit": "probe_exit", "fork-use": "probe_fork_use", "fork-finalize": "probe_fork_finalize",
    "fork-exit": "probe_fork_exit", "gc-thread": "probe_gc_thread", "gc-cycle": "probe_gc_cycle",
}
# Interpreter conditions of every probe run (names from lifeguard.perturb).
PROBE_PERTURBATIONS = ("dev-mode", "malloc-debug")
DEFAULT_TIMEOUT = 20.0
# The forked child's deadline, as a share of the run's: clearly shorter, so the parent is still waiting (and
# the run alive) when it passes, and the supervisor captures the child.
FORK_CHILD_SHARE = 0.5
# Early hang detection of every probe run: a tree still this long ends as hung (RunSpec.hang_settle).
HANG_SETTLE = 2.0
# The gc probes call the hook this many times at most, for this long at most.
GC_ROUNDS = 200
GC_SECONDS = 1.0


def probe_kind(name: str) -> str:
    """A probe's name as PROBES has it (``fork`` -> ``fork-use``); UsageError for an unknown one."""
    kind = PROBE_ALIASES.get(name, name)
    if kind not in PROBES:
        raise UsageError(f"unknown probe {name} (choose from {', '.join(PROBES)}; fork means fork-use)")
    return kind


def parse_hook(text: str, option: str) -> dict[str, Any]:
    """``FILE.py:FUNC`` -> a callable spec for the child; checked here (read, never run)."""
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
    code = getattr(func, "__code__", None)
    qualname = getattr(func, "__qualname__", "")
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    if code is None or "<" in qualname or module is None or not getattr(module, "__file__", None):
        raise UsageError(f"{what} must be a module-level function defined in a file, got {func!r}")
    return {"path": os.path.abspath(code.co_filename), "qualname": qualname, "module_name": module.__name__,
            "sys_path": parent_sys_path()}


def parent_sys_path() -> list[str]:
    """This process's import path, absolute, for a child that must import what this one can."""
    return [os.path.abspath(entry or os.getcwd()) for entry in sys.path]


PROBE_FILE_TEMPLATE = '''"""Generated by lifeguard: the {kinds} probe(s) of {module}."""

from lifeguard.child import probe as probe_child

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
    config = {"module": module, "hook": hook, "check": check, "paths": list(paths), "timeout": timeout,
              "fork_child_timeout": round(timeout * FORK_CHILD_SHARE, 3), "gc_rounds": GC_ROUNDS,
              "gc_seconds": GC_SECONDS, "forks": FORKS, "fork_window": FORK_WINDOW}
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
    """One scenario per probe kind (PROBES, or an alias), all in one generated file under ``folder``."""
    unknown = [kind for kind in kinds if PROBE_ALIASES.get(kind, kind) not in PROBES]
    if unknown or not kinds:
        raise UsageError(f"unknown probe {', '.join(unknown) or '(none)'} (choose from {', '.join(PROBES)})")
    kinds = list(dict.fromkeys(probe_kind(kind) for kind in kinds))
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"{module!r} is not a module name (e.g. mypkg._native)")
    path, lines = write_probe_file(folder, module, kinds, hook=hook, check=check, paths=paths, timeout=timeout)
    return [Scenario(name=f"probe-{kind}[{module}]", function=BODY_FUNCTIONS[kind], path=str(path),
                     line=lines[kind], fixture=None, expect={DEFAULT_VARIANT: "passed"}, timeout=timeout,
                     repeat={"*": repeat}, description=f"{kind} probe: {PROBES[kind]}", kind=RunKind.FUNCTION,
                     replay="")
            for kind in kinds]


# Run by the target interpreter before any probe: find (not import) the module, as `python -c "import X"` would.
_FIND = ("import importlib.util, sys\n"
         "name = sys.argv[1]\n"
         "sys.path[:0] = sys.argv[2:]\n"
         "try:\n"
         "    found = importlib.util.find_spec(name)\n"
         "except Exception as exc:\n"
         "    print(f'{type(exc).__name__}: {exc}'); sys.exit(3)\n"
         "if found is None:\n"
         "    print(f'ModuleNotFoundError: No module named {name!r}'); sys.exit(3)\n")
FIND_TIMEOUT = 60.0  # a parent package's __init__ runs: bounded, and past it the probes themselves say


def module_not_found(executable: str, module: str, paths: Sequence[str]) -> str | None:
    """Why ``module`` cannot be imported by ``executable`` with ``paths`` first on its path (one line), or None
    when it is found, or when the look itself failed (a parent package that crashed or hung: the probes'
    business, with their evidence)."""
    import subprocess

    try:
        done = subprocess.run([executable, "-c", _FIND, module, *paths], capture_output=True, text=True,
                              errors="replace", timeout=FIND_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 3 and lines else None


def probe_options(native: bool = True) -> PlanOptions:
    """How every probe runs: a fresh interpreter under -X dev and PYTHONMALLOC=debug, a hung tree ended
    HANG_SETTLE seconds after it stopped moving (lifeguard.run.stillness)."""
    return PlanOptions(perturbations=PROBE_PERTURBATIONS, mode="fresh", cores=native, hang_settle=HANG_SETTLE)


def _threads(items: Any) -> tuple[ThreadSeen, ...]:
    if not isinstance(items, list):
        return ()
    return tuple(ThreadSeen(str(item[0]), str(item[1]), int(item[2])) for item in items
                 if isinstance(item, list) and len(item) == 3 and isinstance(item[2], int))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def probe_record(result: RunResult) -> ProbeRecord | None:
    """What the probe run did (its PROBE_EXERCISED event and the forks its process made), or None when its
    hook never returned (the import failed, the hook raised, crashed or hung)."""
    event = next((e for e in result.events if e.name == protocol.PROBE_EXERCISED), None)
    if event is None:
        return None
    forks = tuple(ForkSeen(float(e.get("after", 0.0) or 0.0), _count(e.get("threads")), _threads(e.get("hook_threads")))
                  for e in result.events if e.name == protocol.FORK_CHILD and e.pid == event.pid)
    return ProbeRecord(probe=str(event.get("probe", "")), exercised=event.get("exercised") is True,
                       calls=_count(event.get("calls")), raised=_count(event.get("raised")),
                       callback_calls=_count(event.get("callback_calls")), returned=_count(event.get("returned")),
                       of_module=_count(event.get("of_module")), threads_before=_count(event.get("threads_before")),
                       threads_after=_count(event.get("threads_after")),
                       hook_threads=_threads(event.get("hook_threads")),
                       waited=float(event.get("waited", 0.0) or 0.0), forks=forks)


def probe_records(results: Sequence[RunResult], scenario: str) -> tuple[ProbeRecord, ...]:
    """The records of ``scenario``'s runs among ``results``, in run order."""
    found = (probe_record(r) for r in sorted(results, key=lambda r: r.index) if r.scenario == scenario)
    return tuple(record for record in found if record is not None)


def bugs_seen(results: Sequence[RunResult]) -> list[tuple[str, tuple[str, ...]]]:
    """Each distinct problem the failed probe runs found (its first finding, or its outcome and reason), once,
    with the probes that saw it, in the order first seen: one exit crash seen by every probe is one bug."""
    seen: dict[str, list[str]] = {}
    for result in results:
        if result.outcome in (Outcome.PASSED, Outcome.NOT_EXERCISED):
            continue
        finding = result.findings[0] if result.findings else None
        where = f"{result.outcome.value}@{result.phase.value}" if result.phase else result.outcome.value
        problem = f"{where}: {finding}" if finding is not None else f"{where}: {result.reason}"
        kind = result.scenario.partition("[")[0].removeprefix("probe-")
        probes = seen.setdefault(problem, [])
        if kind not in probes:
            probes.append(kind)
    return [(problem, tuple(probes)) for problem, probes in seen.items()]


def probe_verdict(summary: SeriesSummary, records: Sequence[ProbeRecord]) -> str:
    """A probe series in one word: ``not exercised`` when a run's hook used nothing of the module, ``clean`` when
    every run passed having exercised it, else what it found (``hung@fork-child``)."""
    if any(not record.exercised for record in records):
        return NOT_EXERCISED
    failed = summary.first_failure
    if failed is None and summary.runs and records:
        return "clean"
    if failed is None:
        return "no run"
    where = f"@{failed.phase.value}" if failed.phase is not None and failed.outcome is not Outcome.PASSED else ""
    return f"{failed.outcome.value}{where}"
