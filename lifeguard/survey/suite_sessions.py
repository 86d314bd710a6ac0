"""The pytest sessions of ``lifeguard survey --tests``, in the target interpreter: the tests plainly (pytest
alone), then under ``pytest --lifeguard`` once per probe (``exit``: the group's real exit alone; the others:
lifeguard.pytest_plugin.suite_probes). Each session runs in chunks of tests, each bounded, so a session that
runs out of time loses one chunk, and says so; each test's outcome is read back from pytest's short summary
(plain) or lifeguard's report.json (probes).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifeguard.capture.bounded import run_bounded
from lifeguard.interpreter import Interpreter
from lifeguard.model.survey import EXIT_PROBE, PYTEST_FAILED, probe_of_notes
from lifeguard.survey.suites import TestSuite, pytest_base_args, pytest_command

CHUNK = 250  # tests a pytest session; a session past its time loses one chunk
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+::\S.*?)(?:\s+-\s+.*)?$")
# pytest -v's line as each test ends (a session killed at its time limit keeps those): "ID PASSED  [ 10%]".
_PROGRESS = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)(?: \(.*\))?(?:\s+\[\s*\d+%\])?$")


@dataclass(frozen=True)
class TestRun:
    """One test in one session: its outcome, and under a probe what lifeguard's report says of it."""

    outcome: str  # plain: passed, failed, error, skipped, xfail, xpass; lifeguard: its run's outcome
    phase: str | None = None
    reason: str = ""
    probe: str = ""  # "applied", "not applied", "failed", "" (no probe said anything)
    probe_text: str = ""
    findings: tuple[str, ...] = ()  # finding ids, then their one-line texts
    finding_text: str = ""
    run_dir: str = ""
    duration: float = 0.0


@dataclass
class SessionRun:
    """A session over a package's chosen tests: each test's run, and what kept tests from having one."""

    probe: str  # "plain" or a name of SUITE_SESSIONS
    tests: dict[str, TestRun] = field(default_factory=dict)
    seconds: float = 0.0
    lost: list[str] = field(default_factory=list)  # why tests have no run (a chunk past its time, ...)


def target_env(plugin_path: Path | None, pycache: Path) -> dict[str, str]:
    """The sessions' environment: this one, lifeguard's plugin importable when the target lacks it
    (``plugin_path``: a folder holding only the lifeguard package), bytecode (pytest's rewritten test modules
    too) cached in ``pycache``, never beside the suite's files (site-packages)."""
    env = dict(os.environ)
    if plugin_path is not None:
        env["PYTHONPATH"] = str(plugin_path) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)  # each session after the first imports the suite's modules cached
    return env


def run_sessions(interpreter: Interpreter, suite: TestSuite, tests: list[str], probe: str, folder: Path,
                 env: dict[str, str], *, timeout: float, seconds: float, load_plugin: bool) -> SessionRun:
    """``tests`` in chunks under ``probe`` ("plain": pytest alone), within ``seconds`` in all; ``timeout``: each
    test's lifeguard deadline. Reports under ``folder``."""
    run = SessionRun(probe)
    started = time.monotonic()
    chunks = [tests[at:at + CHUNK] for at in range(0, len(tests), CHUNK)]
    for number, chunk in enumerate(chunks):
        left = seconds - (time.monotonic() - started)
        if left <= 0:
            run.lost.append(f"{sum(len(c) for c in chunks[number:])} test(s) not run: the session's time was up")
            break
        report = folder / f"{probe}-{number}"
        argv = [*pytest_command(interpreter), "-rA", *pytest_base_args(suite)]
        if probe == "plain":
            argv += ["-v", "-p", "no:lifeguard"]
        else:
            argv += ["-q", *(["-p", "lifeguard.pytest_plugin.hooks"] if load_plugin else []), "--lifeguard",
                     "--lifeguard-timeout", f"{timeout:g}", "--lifeguard-report", str(report)]
            if probe != EXIT_PROBE:
                argv += ["--lifeguard-probe", probe]
        argv += chunk
        folder.mkdir(parents=True, exist_ok=True)
        ran = run_bounded(argv, left, cwd=str(suite.root), env=env)
        (folder / f"{probe}-{number}.log").write_text(ran.stdout[-200_000:] + ran.stderr[-50_000:],
                                                      encoding="utf-8")
        found = _plain_outcomes(ran.stdout) if probe == "plain" else _lifeguard_outcomes(report)
        missing = [test for test in chunk if test not in found]
        if ran.timed_out and missing:
            run.lost.append(f"{len(missing)} test(s) without an outcome: the session was killed at the survey's "
                            f"time limit ({left:.0f} s)")
        elif missing:
            lines = (ran.stdout + ran.stderr).strip().splitlines() or ["no output"]
            last = next((line for line in lines if "error" in line.lower()), lines[-1]).strip()[:300]
            run.lost.append(f"{len(missing)} test(s) without an outcome (pytest exit {ran.returncode}: {last})")
        run.tests.update((test, found[test]) for test in chunk if test in found)
    run.seconds = time.monotonic() - started
    return run


def _plain_outcomes(stdout: str) -> dict[str, TestRun]:
    """Each test's outcome from pytest's lines: -v's as each test ends, then the short summary's (-rA), its node
    id as collected; a failure or an error (a teardown's after a pass) wins over a pass."""
    found: dict[str, TestRun] = {}
    for line in stdout.splitlines():
        summary = _SUMMARY.match(line.strip())
        progress = None if summary else _PROGRESS.match(line.strip())
        if summary is not None:
            outcome, test = summary.group(1).lower(), summary.group(2)
        elif progress is not None:
            outcome, test = progress.group(2).lower(), progress.group(1)
        else:
            continue
        if outcome in ("failed", "error") or test not in found:
            found[test] = TestRun(outcome)
    return found


def _lifeguard_outcomes(report: Path) -> dict[str, TestRun]:
    """Each test's run from lifeguard's results.jsonl of the session (a run a line, its scenario the test's node
    id), written as the tests end: a session killed at the time limit keeps those it finished."""
    try:
        lines = (report / "results.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    found: dict[str, TestRun] = {}
    for line in lines:
        try:
            run = json.loads(line)
        except ValueError:
            continue  # the line the kill cut
        if isinstance(run, dict) and "scenario" in run:
            found[str(run["scenario"])] = _test_run(run)
    return found


def _test_run(run: dict[str, Any]) -> TestRun:
    notes = [str(note) for note in run.get("notes") or []]
    said = probe_of_notes(notes)
    findings = [f for f in run.get("findings") or [] if isinstance(f, dict)]
    ids = tuple(str(f.get("rule") or f.get("id") or f.get("kind") or "") for f in findings)
    text = str(findings[0].get("summary") or findings[0].get("text") or "") if findings else ""
    return TestRun(str(run.get("outcome")), run.get("phase"), str(run.get("reason") or ""),
                   said[1] if said else "", said[2] if said else "", ids, text, str(run.get("run_dir") or ""),
                   float(run.get("duration") or 0.0))


def pytest_failure(run: TestRun) -> bool:
    """Did pytest itself fail the test in a lifeguard session (not lifeguard's supervision)?"""
    return run.outcome == "failed" and run.reason.startswith(PYTEST_FAILED.split("{", 1)[0])
