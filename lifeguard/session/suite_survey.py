"""``lifeguard survey --tests``: each package's own test suite as the survey's exercise, from the packages named to
suites.json and suites.html.

For each package: find its tests (lifeguard.survey.suites), collect them, run a pilot of them plainly to learn
their pace, choose as many as the budget allows (evenly over the suite's modules), run those plainly, then the
ones that passed under ``pytest --lifeguard`` once per probe (lifeguard.survey.suite_sessions), and triage what
failed only under a probe (lifeguard.survey.suite_triage), each candidate with a reproduction checked alone.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifeguard.errors import SurveyError
from lifeguard.interpreter import Interpreter
from lifeguard.model.survey import CANDIDATE, DOCUMENTED, FORK_PROBES, SUITE_SESSIONS
from lifeguard.report.suites import render_suites_page
from lifeguard.run.launch import child_path_dir
from lifeguard.survey.limitations import read_limitations
from lifeguard.survey.suite_sessions import CHUNK, SessionRun, run_sessions, target_env
from lifeguard.survey.suite_triage import (
    UNJUDGED,
    SuiteCandidate,
    check_reproduction,
    group_candidates,
    write_reproduction,
)
from lifeguard.survey.suites import (
    TestSuite,
    collect,
    given_tests,
    install_test_deps,
    installed_tests,
    sample,
    sdist_tests,
)

PILOT_TESTS = 40  # run plainly first, to learn the suite's pace
# A test's cost in a probe's session, in plain runs of it (the group's supervision, the probe, a second run), and
# the forked child's own of a fork probe: a fork and an exit through finalization (numpy's: tens of ms).
PROBE_COST = 2.5
FORKED_TEST = 0.1
SESSION_OVERHEAD = 2.0  # seconds of a lifeguard session's own, past pytest's: its plugin, exits, report
SCHEMA = 1
_PLUGINS = ("import pytest, importlib.metadata as m, json; "
            "print(json.dumps([e.name for e in m.entry_points(group='pytest11')]))")


@dataclass(frozen=True)
class SuiteRequest:
    """What to survey through its tests, and within what."""

    interpreter: Interpreter
    packages: tuple[tuple[str, str], ...]  # (distribution, installed version)
    report: Path
    probes: tuple[str, ...]  # of SUITE_SESSIONS
    timeout: float  # each test's deadline under lifeguard, and a reproduction's
    budget: float  # seconds per package
    tests_from: Path | None = None
    install_test_deps: bool = False
    limitations_file: Path | None = None


@dataclass
class SuiteSurvey:
    """One package's survey through its tests."""

    package: str
    version: str
    origin: str = ""
    collected: int = 0  # tests collected, from ``files`` of the suite's ``files_in_suite`` test files
    files: int = 0
    files_in_suite: int = 0
    chosen: int = 0
    passed_plainly: int = 0
    failed_plainly: list[str] = field(default_factory=list)
    plain_lost: list[str] = field(default_factory=list)  # why chosen tests have no plain outcome
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)  # probe -> ran, applied, not applied, ...
    candidates: list[SuiteCandidate] = field(default_factory=list)
    problem: str = ""  # why the package could not be surveyed (no tests found, pytest missing, ...)
    seconds: float = 0.0


def survey_suites(request: SuiteRequest, progress: Any = print) -> list[SuiteSurvey]:
    """Survey each package of ``request`` through its tests; write suites.json into the report folder."""
    limitations = read_limitations()
    if request.limitations_file is not None:
        limitations += read_limitations(request.limitations_file)
    done = []
    for name, version in request.packages:
        started = time.monotonic()
        surveyed = SuiteSurvey(name, version)
        try:
            _survey_one(request, surveyed, limitations, progress)
        except SurveyError as exc:
            surveyed.problem = str(exc)
        surveyed.seconds = round(time.monotonic() - started, 1)
        done.append(surveyed)
        write_suites_json(done, request)
    return done


def _pytest_plugins(interpreter: Interpreter, folder: Path) -> list[str]:
    """The pytest11 entry points of the target (is lifeguard's plugin installed there?); SurveyError without
    pytest. Asked in ``folder``: a folder with a distribution's metadata (a source checkout) would answer for it."""
    from lifeguard.capture.bounded import run_bounded

    ran = run_bounded([interpreter.executable, "-c", _PLUGINS], 60.0, cwd=str(folder))
    try:
        if ran.returncode == 0:
            return [str(name) for name in json.loads(ran.stdout)]
    except ValueError:
        pass
    raise SurveyError(f"pytest cannot be imported in {interpreter.executable} "
                      f"({(ran.stderr.strip().splitlines() or ['timed out'])[-1]}): --install-test-deps installs it")


def _survey_one(request: SuiteRequest, surveyed: SuiteSurvey, limitations: list[Any], progress: Any) -> None:
    name, version = surveyed.package, surveyed.version
    work = request.report / "suites" / name
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + request.budget
    suite = _find_suite(request, name, version, work)
    surveyed.origin = suite.origin
    progress(f"{name} {version}: tests {suite.origin}")
    if request.install_test_deps:
        install_test_deps(request.interpreter, suite, work)
    load_plugin = "lifeguard" not in _pytest_plugins(request.interpreter, request.report)
    env = target_env(child_path_dir() if load_plugin else None, work / "pycache")
    collecting = time.monotonic()
    ids, surveyed.files, surveyed.files_in_suite = collect(request.interpreter, suite, work, env,
                                                            timeout=max(30.0, request.budget / 3))
    start = time.monotonic() - collecting  # a session's own cost: pytest's start, the suite's imports, collection
    surveyed.collected = len(ids)
    pilot_ids = sample(ids, PILOT_TESTS)
    pilot = run_sessions(request.interpreter, suite, pilot_ids, "plain", work / "sessions" / "pilot", env,
                         timeout=request.timeout, seconds=_left(deadline) / 4, load_plugin=False)
    pace = max(pilot.seconds - start, 0.0) / max(1, len(pilot.tests)) + 0.002
    probes = [probe for probe in SUITE_SESSIONS if probe in request.probes]
    forks = sum(probe in FORK_PROBES for probe in probes)
    cost = pace * (1 + PROBE_COST * len(probes)) + FORKED_TEST * forks
    affordable = int(max(0.0, _left(deadline) - (start + SESSION_OVERHEAD) * (1 + len(probes))) / cost)
    chosen = sample(ids, max(len(pilot_ids), min(len(ids), affordable)))
    surveyed.chosen = len(chosen)
    plain_seconds = (start + SESSION_OVERHEAD) * (1 + len(chosen) // CHUNK) + 3 * pace * len(chosen)
    plain = pilot if chosen == pilot_ids else run_sessions(
        request.interpreter, suite, chosen, "plain", work / "sessions", env, timeout=request.timeout,
        seconds=min(_left(deadline) / 2, plain_seconds), load_plugin=False)
    surveyed.plain_lost = plain.lost
    passing = [test for test in chosen if test in plain.tests and plain.tests[test].outcome == "passed"]
    surveyed.passed_plainly = len(passing)
    surveyed.failed_plainly = [t for t in chosen if t in plain.tests and plain.tests[t].outcome in ("failed", "error")]
    progress(f"{name}: {len(ids)} tests collected from {surveyed.files} of {surveyed.files_in_suite} test files, "
             f"{len(chosen)} chosen, {len(passing)} passed plainly "
             f"({plain.seconds:.1f} s)")
    for at, probe in enumerate(probes):
        seconds = _left(deadline) / (len(probes) - at)
        session = run_sessions(request.interpreter, suite, passing, probe, work / "sessions", env,
                               timeout=request.timeout, seconds=seconds, load_plugin=load_plugin)
        found = group_candidates(name, version, probe, plain.tests, session.tests, limitations)
        surveyed.sessions[probe] = _session_counts(session, len(passing))
        surveyed.candidates += found
        progress(f"{name}: {probe}: {len(session.tests)} test(s) run, {surveyed.sessions[probe]['applied']} "
                 f"probed, {sum(len(c.tests) for c in found)} failed only here ({session.seconds:.1f} s)")
    for candidate in surveyed.candidates:
        if candidate.verdict == CANDIDATE:
            _reproduce(request, candidate, suite, passing, work, env, progress)


def _reproduce(request: SuiteRequest, candidate: SuiteCandidate, suite: TestSuite, order: list[str], work: Path,
               env: dict[str, str], progress: Any) -> None:
    """The candidate's reproduction, checked alone; when its test alone never reproduces, one that runs the
    tests of its session's chunk before it first, in one process, as the survey did."""
    folder = request.report / "repro"
    script = write_reproduction(candidate, suite, folder, request.timeout)
    reproduced = check_reproduction(script, request.interpreter, request.timeout, work, env)
    if reproduced[0] == 0 and candidate.smallest in order:
        at = order.index(candidate.smallest)
        before = order[at - at % CHUNK:at]
        if before:
            script = write_reproduction(candidate, suite, folder, request.timeout, before)
            reproduced = check_reproduction(script, request.interpreter, request.timeout, work, env)
    candidate.reproduction, candidate.reproduced = str(script), reproduced
    progress(f"{candidate.package}: {candidate.probe} {candidate.failure}: {len(candidate.tests)} test(s); "
             f"reproduction {script.name}: {reproduced[0]} of {reproduced[1]}")


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _find_suite(request: SuiteRequest, name: str, version: str, work: Path) -> TestSuite:
    if request.tests_from is not None:
        return given_tests(request.tests_from, name, version)
    suite = installed_tests(request.interpreter, name)
    if suite is None:
        suite = sdist_tests(request.interpreter, name, version, work / "sdist")
    if suite is None:
        raise SurveyError(f"{name} {version}: no tests installed with it, none in its source distribution")
    return suite


def _session_counts(session: SessionRun, asked: int) -> dict[str, Any]:
    runs = session.tests.values()
    unjudged = [test for test, run in session.tests.items() if run.outcome == UNJUDGED]
    return {"asked": asked, "ran": len(session.tests), "applied": sum(r.probe in ("applied", "failed") for r in runs),
            "not_applied": sum(r.probe == "not applied" for r in runs), "seconds": round(session.seconds, 1),
            "lost": session.lost + ([f"{len(unjudged)} test(s) lifeguard could not judge (how the run ended is "
                                     f"unknown: {session.tests[unjudged[0]].reason[:200]})"] if unjudged else [])}


def write_suites_json(done: list[SuiteSurvey], request: SuiteRequest) -> Path:
    path = request.report / "suites.json"
    data = {"schema": SCHEMA, "python": request.interpreter.executable, "budget": request.budget,
            "timeout": request.timeout, "probes": list(request.probes),
            "packages": [asdict(surveyed) for surveyed in done]}
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    (request.report / "suites.html").write_text(render_suites_page(json.loads(path.read_text(encoding="utf-8")),
                                                                   request.report), encoding="utf-8")
    return path


def suites_table(done: list[SuiteSurvey], probes: tuple[str, ...]) -> str:
    """The terminal table: a package a line; each probe's column is tests run (tests the probe applied to)."""
    shown = [probe for probe in SUITE_SESSIONS if probe in probes]
    head = ["package", "tests", "plain", *shown, "candidates", "documented", "time"]
    rows = [head]
    for item in done:
        cells = [f"{item.package} {item.version}", f"{item.chosen}/{item.collected}", str(item.passed_plainly)]
        for probe in shown:
            counts = item.sessions.get(probe)
            cells.append("-" if counts is None else f"{counts['ran']} ({counts['applied']})" if probe != "exit"
                         else str(counts["ran"]))
        cells += [str(sum(c.verdict == CANDIDATE for c in item.candidates)),
                  str(sum(c.verdict == DOCUMENTED for c in item.candidates)), f"{item.seconds:.0f} s"]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    for item in done:
        if item.problem:
            lines.append(f"{item.package}: not surveyed: {item.problem}")
        for why in item.plain_lost:
            lines.append(f"{item.package}: run plainly, {why}")
        for probe in shown:  # a probe's column counts the tests it ran: say why the others have no outcome
            for why in item.sessions.get(probe, {}).get("lost", []):
                lines.append(f"{item.package}: under {probe}, {why}")
        for candidate in item.candidates:
            more = f" and {len(candidate.tests) - 1} more" if len(candidate.tests) > 1 else ""
            lines.append(f"{item.package}: {candidate.verdict}: {candidate.probe} probe, {candidate.failure}: "
                         f"{candidate.finding[:160]}")
            lines.append(f"    tests: {candidate.smallest}{more}")
            if candidate.link:
                lines.append(f"    documented: {candidate.link}")
            if candidate.reproduction:
                lines.append(f"    reproduction: {candidate.reproduction} (reproduced {candidate.reproduced[0]} of "
                             f"{candidate.reproduced[1]} runs alone)")
    return "\n".join(lines)
