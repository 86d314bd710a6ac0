"""Triage of ``lifeguard survey --tests``: from each test's plain outcome and its runs under the probes, the
candidates a maintainer can act on.

A test that passed plainly and failed only under a probe is a candidate's test (under ``exit``: failed by
lifeguard, not by pytest). The tests that fail one way (probe, outcome and phase, finding) make one candidate,
listed; a documented limitation (package, version, probe) makes it ``documented``. Each candidate gets a
standalone reproduction of its quickest test: plain Python and the package when the test is a plain function of
a module without a package (else the test under plain pytest with a small plugin in the script), the probe
written out, no lifeguard; it is run REPRO_RUNS times alone, and the candidate says how many reproduced. When it
reproduces in none, a second script runs the tests of the survey's session before it first, in one process, as
the survey did (a thread pool an earlier test started is the state some bugs need).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lifeguard.capture.bounded import run_bounded
from lifeguard.interpreter import Interpreter
from lifeguard.model.survey import CANDIDATE, DOCUMENTED, EXIT_PROBE, Limitation
from lifeguard.survey.limitations import matching
from lifeguard.survey.suite_sessions import TestRun, pytest_failure
from lifeguard.survey.suites import TestSuite, pytest_base_args

REPRO_RUNS = 3
REPRO_SLACK = 30.0  # a reproduction's bound past its own deadline: its start, the package's import


@dataclass
class SuiteCandidate:
    """Tests of one package that fail one way under one probe."""

    package: str
    version: str
    probe: str
    failure: str  # outcome@phase
    finding: str  # the first finding's kind and summary, else the run's reason
    tests: list[str] = field(default_factory=list)
    verdict: str = CANDIDATE  # or DOCUMENTED
    link: str = ""  # a documented limitation's
    run_dir: str = ""  # the evidence of the quickest test's failed run
    smallest: str = ""
    reproduction: str = ""
    reproduced: tuple[int, int] = (0, 0)  # (runs that failed, runs) of the reproduction alone


UNJUDGED = "error"  # a run's outcome when lifeguard could not tell how it ended: no verdict, never a candidate


def failed_under_probe(probe: str, plain: TestRun | None, run: TestRun) -> bool:
    """Did ``probe`` fail a test that passed plainly? A run lifeguard could not judge (its exit status taken by
    the program's own waitpid, lifeguard's own failure) says nothing either way: its session counts it."""
    if plain is None or plain.outcome != "passed" or run.outcome == UNJUDGED:
        return False
    if probe == EXIT_PROBE:
        return run.outcome != "passed" and not pytest_failure(run)
    return run.probe == "failed"


def _shape(text: str) -> str:
    """A failure's words without what changes from run to run (pids, addresses, times)."""
    return re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", text)[:160]


def group_candidates(package: str, version: str, probe: str, plain: dict[str, TestRun],
                     runs: dict[str, TestRun], limitations: Sequence[Limitation]) -> list[SuiteCandidate]:
    """The candidates of one probe's session: failed tests grouped by how they failed, quickest first."""
    groups: dict[tuple[str, str], SuiteCandidate] = {}
    quickest: dict[tuple[str, str], float] = {}
    for test, run in runs.items():
        if not failed_under_probe(probe, plain.get(test), run):
            continue
        failure = f"{run.outcome}@{run.phase}" if run.phase else run.outcome
        finding = f"[{run.findings[0]}] {run.finding_text}" if run.findings and run.findings[0] else run.reason
        key = (failure, run.findings[0] if run.findings and run.findings[0] else _shape(run.reason))
        candidate = groups.get(key)
        if candidate is None:
            candidate = groups[key] = SuiteCandidate(package, version, probe, failure, finding)
            documented = matching(limitations, package, version, probe)
            if documented is not None:
                candidate.verdict, candidate.link = DOCUMENTED, documented.link
        candidate.tests.append(test)
        if key not in quickest or run.duration < quickest[key]:
            quickest[key] = run.duration
            candidate.smallest, candidate.run_dir = test, run.run_dir
    return sorted(groups.values(), key=lambda c: -len(c.tests))


# --- reproductions -----------------------------------------------------------------------------------------

_PROBE_CODE = r'''
import gc
import os
import signal
import sys
import threading
import time
import types

PROBE = {probe!r}
DEADLINE = {deadline!r}  # seconds for the probe's forked child or collection; past it: hung (exit 124)
PLAIN = (int, float, complex, str, bytes, bool, type(None), types.ModuleType, type, types.FunctionType,
         types.BuiltinFunctionType, types.MethodType)


class LocalsAtReturn:
    """While in effect: the local variables (not the arguments) of the function of ``code`` as it returned."""

    def __init__(self, code):
        self.code = code
        self.arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
        self.seen = {{}}

    def profile(self, frame, event, arg):
        if event == "return" and frame.f_code is self.code:
            self.seen.clear()
            self.seen.update((k, v) for k, v in frame.f_locals.items() if k not in self.arguments)

    def __enter__(self):
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)

    def made(self):
        made = {{k: v for k, v in self.seen.items() if not isinstance(v, PLAIN)}}
        self.seen.clear()
        return made


def made_by(code, call):
    """Call ``call``; the local variables of the function of ``code`` as it returned (not its arguments)."""
    with LocalsAtReturn(code) as watch:
        call()
    return watch.made()


def finalize(code):
    """The whole exit of an interpreter: threading's shutdown, atexit, finalization, C++ static destructors."""
    import ctypes

    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.pythonapi.Py_Exit.argtypes = [ctypes.c_int]
    ctypes.pythonapi.Py_Exit(code)


def in_cycles(made):
    for name in list(made):
        box = [made.pop(name)]
        try:
            setattr(box[0], "_lifeguard_cycle", box)  # the object itself in the cycle: tp_clear first
        except Exception:
            box.append(box)
        del box


def probe(made, run_again):
    """The probe after the test passed; the process's exit code (124: hung)."""
    if PROBE == "exit":
        return 0  # what the test left is finalized at this process's exit
    if PROBE == "gc-cycle":
        in_cycles(made)
        print(f"gc-cycle: {{gc.collect()}} object(s) collected on the main thread", flush=True)
        return 0
    if PROBE == "gc-thread":
        in_cycles(made)
        gc.disable()
        collector = threading.Thread(target=gc.collect, name="collector", daemon=True)
        collector.start()
        collector.join(DEADLINE)
        if collector.is_alive():
            print(f"gc-thread: the collection on another thread did not end within {{DEADLINE}} s", flush=True)
            os._exit(124)
        gc.enable()
        print("gc-thread: collected on another thread", flush=True)
        return 0
    if PROBE == "fork-rerun":
        made.clear()
    pid = os.fork()
    if pid == 0:
        if PROBE == "fork-finalize":
            made.clear()
            gc.collect()
            finalize(0)
        finalize(0 if run_again() else 1)
    ends = time.monotonic() + DEADLINE
    while time.monotonic() < ends:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            print(f"{{PROBE}}: the forked child ended with {{code}}", flush=True)
            return 0 if code == 0 else (128 - code if code < 0 else code)
        time.sleep(0.05)
    print(f"{{PROBE}}: the forked child {{pid}} did not end within {{DEADLINE}} s: hung", flush=True)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return 124
'''

_PLAIN_MAIN = r'''
import importlib.util

TEST_FILE = {path!r}
TEST = {name!r}
sys.path.insert(0, os.path.dirname(TEST_FILE))
spec = importlib.util.spec_from_file_location({module!r}, TEST_FILE)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
test = getattr(module, TEST)


def run_again():
    try:
        test()
    except BaseException as exc:
        print(f"run again in the forked child, the test raised {{exc!r}}", flush=True)
        return False
    return True


made = made_by(test.__code__, test)
print(f"{{TEST}} passed; it made: {{', '.join(sorted(made)) or 'nothing kept'}}", flush=True)
sys.exit(probe(made, run_again))
'''

def write_reproduction(candidate: SuiteCandidate, suite: TestSuite, folder: Path, deadline: float,
                       before: Sequence[str] = ()) -> Path:
    """A standalone script for the candidate's quickest test under its probe (see the module's docstring);
    ``before``: tests that run first in the same process, as they did in the survey's (the state a library is
    left in by earlier tests: a thread pool one of them started)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9]+", "-", f"{candidate.package}-{candidate.probe}-{candidate.smallest}")[:110]
    script = folder / f"{stem.strip('-')}{'-after-' + str(len(before)) if before else ''}.py"
    first = f", after {len(before)} test(s) of its session" if before else ""
    header = (f'"""Reproduction: {candidate.package} {candidate.version}, test {candidate.smallest}{first},\n'
              f'then the {candidate.probe} probe (lifeguard survey --tests found: {candidate.failure},\n'
              f'{candidate.finding[:300]}).\n\nRun: python {script.name}  (the interpreter with {candidate.package} '
              f'installed). Exit 0: not reproduced.\n"""\n')
    probe_code = _PROBE_CODE.format(probe=candidate.probe, deadline=deadline)
    plain = None if before else _plain_test(suite, candidate.smallest)
    if plain is not None:
        path, name = plain
        main = _PLAIN_MAIN.format(path=str(path), name=name, module=path.stem)
        script.write_text(header + probe_code + main, encoding="utf-8")
        return script
    tests = [str(suite.root / test) for test in (*before, candidate.smallest)]
    argv = [*pytest_base_args(suite), "-p", "no:lifeguard", "-q", *tests]
    main = (f"\n\nif __name__ == '__main__':\n    import pytest\n\n"
            f"    sys.exit(pytest.main({argv!r}, plugins=[sys.modules[__name__]]))\n")
    plugin = _pytest_plugin().replace("@TARGET@", repr(candidate.smallest))
    script.write_text(header + probe_code + plugin + main, encoding="utf-8")
    return script


def _pytest_plugin() -> str:
    return r'''

import pytest

TARGET = @TARGET@  # the test the probe follows; the others run before it, as they did in the survey
_made = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):  # not pytest_pyfunc_call: pytest runs a unittest method without it
    code = getattr(getattr(item, "obj", None), "__code__", None)
    if code is None or item.nodeid != TARGET:
        return (yield)
    _made.clear()
    watch = LocalsAtReturn(code)
    try:
        with watch:
            return (yield)
    finally:
        _made.update(watch.made())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    from _pytest.runner import runtestprotocol

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    if item.nodeid == TARGET and reports and all(report.passed for report in reports):
        def run_again():
            again = runtestprotocol(item, log=False, nextitem=item.parent)
            return all(report.passed for report in again)

        made = dict(_made)
        _made.clear()  # the probe holds the only references: the objects die when it drops them
        print(f"{TARGET} passed; it made: {', '.join(sorted(made)) or 'nothing kept'}", flush=True)
        code = probe(made, run_again)
        if code:
            sys.stdout.flush()
            os._exit(code)
    return True
'''


def _plain_test(suite: TestSuite, test: str) -> tuple[Path, str] | None:
    """(file, function) when the test is a module-level function without arguments, decorators or a package
    around its module: it then runs without pytest."""
    path_text, _, name = test.partition("::")
    path = suite.root / path_text
    if "::" in name or "[" in name or (path.parent / "__init__.py").exists() or not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            arguments = node.args
            if node.decorator_list or arguments.args or arguments.kwonlyargs or arguments.vararg \
                    or arguments.kwarg or arguments.posonlyargs:
                return None
            return path, name
    return None


def check_reproduction(script: Path, interpreter: Interpreter, deadline: float, cwd: Path,
                       env: dict[str, str], runs: int = REPRO_RUNS) -> tuple[int, int]:
    """(runs that reproduced, runs): the script alone, ``runs`` times, each bounded."""
    failed = 0
    for _ in range(runs):
        ran = run_bounded([interpreter.executable, str(script)], deadline + REPRO_SLACK, cwd=str(cwd), env=env)
        if ran.timed_out or ran.returncode != 0:
            failed += 1
    return failed, runs
