"""The `lifeguard` fixture: run code, scripts, functions and probes in fresh supervised interpreters."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lifeguard.build import build_fixture
from lifeguard.errors import LifeguardError, MarkerError
from lifeguard.model.outcomes import Outcome
from lifeguard.model.result import Session
from lifeguard.model.run import RunKind
from lifeguard.model.scenario import DEFAULT_TIMEOUT, Scenario
from lifeguard.model.survey import NOT_EXERCISED, ProbeRecord
from lifeguard.model.validate import positive_count, positive_seconds
from lifeguard.plan.discover import code_scenario, script_scenario
from lifeguard.plan.probes import (
    PROBE_ALIASES,
    PROBES,
    callable_spec,
    parent_sys_path,
    parse_hook,
    probe_options,
    probe_records,
    probe_scenarios,
    probe_verdict,
)
from lifeguard.pytest_plugin.assertions import Runs
from lifeguard.pytest_plugin.marker import _variants, label_of
from lifeguard.pytest_plugin.runner import (
    BODY_FUNCTION,
    check_sendable,
    prebuild,
    run_engine,
    workspace,
    write_body,
)
from lifeguard.pytest_plugin.session_report import SessionRecord
from lifeguard.pytest_plugin.settings import Settings
from lifeguard.pytest_plugin.verdicts import interpreter


class LifeguardFixture:
    """The ``lifeguard`` fixture: run code, scripts, functions and probes in fresh supervised interpreters.

    Every call returns :class:`lifeguard.assertions.Runs`, whose ``assert_clean()``,
    ``assert_outcome("hung")`` and ``assert_finding(kind)`` show the evidence when they fail.
    A ``timeout=`` / ``repeat=`` given here wins over ``--lifeguard-timeout`` / ``--lifeguard-repeat``,
    which win over their ini values (the marker's order, and pytest-timeout's).
    """

    def __init__(self, item: pytest.Item, settings: Settings, record: SessionRecord) -> None:
        self._item = item
        self._settings = settings
        self._record = record
        self._calls = 0

    def _limits(self, timeout: float | None, repeat: int | None, what: str) -> tuple[float, int]:
        try:
            chosen_timeout = (positive_seconds(timeout, f"timeout of {what}") if timeout is not None
                              else self._settings.timeout or DEFAULT_TIMEOUT)
            chosen_repeat = (positive_count(repeat, f"repeat of {what}") if repeat is not None
                             else self._settings.repeat or 1)
        except ValueError as exc:
            raise MarkerError(str(exc)) from None
        return chosen_timeout, chosen_repeat

    def _call_name(self, kind: str) -> str:
        self._calls += 1
        return f"{self._calls:02d}-{kind}"

    def _run(self, kind: str, make: Callable[[Path], list[Scenario]]) -> Runs:
        __tracebackhide__ = True
        name = self._call_name(kind)
        try:
            self._record.open()
            with workspace(self._item, self._record).call(name) as folders:
                session = run_engine(make(folders.body), folders)
        except LifeguardError as exc:
            raise MarkerError(f"{exc}\n{exc.HELP_TEXT}".strip()) from None
        self._record.add_call(f"{self._item.nodeid}::{name}", session)
        return Runs(f"{label_of(self._item)} {kind}", session)

    def run_code(self, code: str, *, timeout: float | None = None, repeat: int | None = None) -> Runs:
        """Run ``code`` as ``python -c`` would, in a fresh supervised interpreter."""
        __tracebackhide__ = True

        seconds, runs = self._limits(timeout, repeat, "run_code")
        return self._run("code", lambda _: [replace(code_scenario(code, seconds), repeat={"*": runs})])

    def run_script(self, path: str | os.PathLike[str], *, argv: Sequence[str] = (),
                   timeout: float | None = None, repeat: int | None = None) -> Runs:
        """Run a Python script as ``python path argv...`` would."""
        __tracebackhide__ = True

        script = Path(path).resolve()
        if not script.is_file():
            raise MarkerError(f"run_script: no such file {script}")
        seconds, runs = self._limits(timeout, repeat, "run_script")
        scenario = script_scenario(script, seconds, argv=(str(script), *map(str, argv)))
        return self._run("script", lambda _: [replace(scenario, repeat={"*": runs})])

    def run_function(self, func: Callable[..., Any], *args: Any, fixture: str | None = None,
                     variant: str | Sequence[str] | None = None, timeout: float | None = None,
                     repeat: int | None = None, **kwargs: Any) -> Runs:
        """Call a module-level ``func(*args, **kwargs)`` in a fresh interpreter.

        With ``fixture=``, the native fixture ``fixtures_native/<fixture>/`` (found from
        ``func``'s file) is built per variant (``variant=``: "buggy", "fixed" or both) and
        importable by name inside ``func``.
        """
        __tracebackhide__ = True
        try:
            target = callable_spec(func, "run_function's function")
        except LifeguardError as exc:
            raise MarkerError(str(exc)) from None
        seconds, runs = self._limits(timeout, repeat, "run_function")
        where = f"run_function({getattr(func, '__qualname__', func)!r})"
        for position, value in enumerate(args):
            check_sendable(f"#{position}", value, where)
        for name, value in kwargs.items():
            check_sendable(name, value, where)
        variants = _variants(variant, fixture, None, f"variant of {where}")
        near = Path(target["path"]).parent
        if fixture is not None:
            try:
                prebuild(fixture, variants, near)
            except LifeguardError as exc:
                raise MarkerError(f"{exc}\n{exc.HELP_TEXT}".strip()) from None

        def make(folder: Path) -> list[Scenario]:
            body = write_body(folder, where, target, args, kwargs)
            return [Scenario(name=getattr(func, "__name__", "function"), function=BODY_FUNCTION, path=str(body),
                             line=func.__code__.co_firstlineno, fixture=fixture,
                             expect={v: "passed" for v in variants}, timeout=seconds, repeat={"*": runs},
                             description=where, kind=RunKind.FUNCTION, replay="", fixture_near=str(near))]

        return self._run("function", make)

    def probe(self, module: str, probe: str = "exit", *, hook: Callable[[Any], Any] | str | None = None,
              check: Callable[[Any], Any] | str | None = None, paths: Sequence[str | os.PathLike[str]] = (),
              timeout: float | None = None, repeat: int | None = None) -> Runs:
        """Run one probe of ``module`` (a name of PROBES, or "fork" for "fork-use"; see ``lifeguard probe``).

        ``hook`` / ``check``: a module-level function or ``"file.py:func"``. ``paths``:
        folders to import ``module`` from; this process's import path is always added. What each run did
        with the module is printed and kept in the result's ``exercised``; a probe that exercised nothing
        fails the test here (``not exercised``), whatever the test asserts next.
        """
        __tracebackhide__ = True
        if PROBE_ALIASES.get(probe, probe) not in PROBES:
            raise MarkerError(f"probe {probe!r}: choose from {', '.join(PROBES)}")
        try:
            hook_spec = _hook_spec(hook, "hook")
            check_spec = _hook_spec(check, "check")
        except LifeguardError as exc:
            raise MarkerError(str(exc)) from None
        seconds, runs = self._limits(timeout, repeat, f"probe {probe!r}")
        search = [os.path.abspath(p) for p in paths] + parent_sys_path()
        name = self._call_name(f"probe-{probe}")
        try:
            self._record.open()
            with workspace(self._item, self._record).call(name) as folders:
                scenarios = probe_scenarios(module, (probe,), folders.body, hook=hook_spec, check=check_spec,
                                            paths=search, timeout=seconds, repeat=runs)
                session = run_engine(scenarios, folders, probe_options())
        except LifeguardError as exc:
            raise MarkerError(f"{exc}\n{exc.HELP_TEXT}".strip()) from None
        self._record.add_call(f"{self._item.nodeid}::{name}", session)
        label = f"{probe} probe of {module}"
        return Runs(label, session, exercised=_exercised(label, session, scenarios[0].name))

    def build(self, fixture: str, variant: str = "buggy") -> Path:
        """Build ``fixtures_native/<fixture>`` (found from the test file) and return the folder to import it from."""

        try:
            return build_fixture(fixture, variant, interpreter(), near=Path(str(self._item.path)).parent).directory
        except LifeguardError as exc:
            raise MarkerError(f"{exc}\n{exc.HELP_TEXT}".strip()) from None



def _exercised(label: str, session: Session, scenario: str) -> tuple[ProbeRecord, ...]:
    """Each run's record of what the probe did with the module, printed (the test's captured output); the test
    fails here when the probe was not exercised, as `lifeguard probe` exits 1: it says nothing of the module."""
    __tracebackhide__ = True
    records = probe_records(session.results, scenario)
    for number, record in enumerate(records, 1):
        print(f"lifeguard: {label}, run {number}: {record.text()}")
    summary = next((s for s in session.summaries if s.scenario == scenario), None)
    if summary is not None and probe_verdict(summary, records) == NOT_EXERCISED:
        unused = next((r for r in session.results if r.outcome is Outcome.NOT_EXERCISED), None)
        why = unused.reason if unused is not None else "its hook used nothing of the module"
        did = next((r.text() for r in records if not r.exercised), "")
        pytest.fail(f"{label}: {NOT_EXERCISED}: {why}\n  what it did: {did}\n  a probe says something of a "
                    "module only through a hook that uses it: probe(..., hook=FUNC or 'file.py:func')", pytrace=False)
    return records


def _hook_spec(hook: Callable[[Any], Any] | str | None, what: str) -> dict[str, Any] | None:
    if hook is None:
        return None
    if isinstance(hook, str):
        return parse_hook(hook, what)
    return callable_spec(hook, what)
