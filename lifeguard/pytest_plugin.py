"""lifeguard's pytest plugin: ``@pytest.mark.lifeguard`` and the ``lifeguard`` fixture.

Registered through the ``pytest11`` entry point; ``-p no:lifeguard`` switches it
off. A marked test's body runs in fresh supervised interpreters, each living a
whole process lifetime (so a crash in finalization or in a static destructor
fails the test); the test passes when every run ends as the marker expects.
Imports stay light here: the engine is loaded only by a test that uses the
marker or the fixture.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from lifeguard.pytest_runner import LifeguardFixture, MarkerOptions

# One help text per setting, shared by the command-line option and its ini twin.
TIMEOUT_HELP = ("deadline in seconds of every supervised run of a lifeguard test or fixture call; "
                "overrides the marker's timeout=")
REPEAT_HELP = ("runs of every lifeguard test's body (and fixture call) in fresh interpreters; "
               "overrides the marker's repeat=")
REPORT_HELP = ("keep each lifeguard test's results.jsonl, report.json, junit.xml and the evidence "
               "of every failed run in DIR/<test id>/")
MARKER_HELP = (
    "lifeguard(timeout=30, repeat=1, expect='passed', fixture=None, variant=None): run the test's body in "
    "fresh supervised interpreters, each for a whole process lifetime; the test passes when every run ends "
    "as expected: an outcome (passed, failed, crashed, hung, corrupted) with an optional phase (import, run, "
    "exit, fork-child), e.g. 'crashed@exit', or a dict per variant. fixture= builds fixtures_native/<name>/ "
    "found from the test file (variant= 'buggy', 'fixed' or both); the body imports it by name."
)


@dataclass(frozen=True)
class Settings:
    """The session's lifeguard settings (command line over ini file); None where unset."""

    timeout: float | None = None
    repeat: int | None = None
    report_dir: Path | None = None


SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()
MARKER_KEY: pytest.StashKey[MarkerOptions] = pytest.StashKey()


def positive_number(value: Any, source: str) -> float:
    """Seconds: a finite number above zero; the error names ``source``."""
    if isinstance(value, bool):
        raise ValueError(f"{source}: {value!r} is not a number of seconds")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: {value!r} is not a number of seconds") from None
    if not number > 0 or math.isinf(number):
        raise ValueError(f"{source}: {value!r} must be a positive number of seconds")
    return number


def positive_whole_number(value: Any, source: str) -> int:
    """A count of at least 1; the error names ``source``."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"{source}: {value!r} is not a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: {value!r} is not a whole number") from None
    if number < 1:
        raise ValueError(f"{source}: {value!r} must be at least 1")
    return number


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lifeguard", "lifeguard: lifetime bugs of native extensions")
    group.addoption("--lifeguard-timeout", dest="lifeguard_timeout", metavar="SECONDS", help=TIMEOUT_HELP)
    group.addoption("--lifeguard-repeat", dest="lifeguard_repeat", metavar="N", help=REPEAT_HELP)
    group.addoption("--lifeguard-report", dest="lifeguard_report", metavar="DIR", help=REPORT_HELP)
    parser.addini("lifeguard_timeout", TIMEOUT_HELP)
    parser.addini("lifeguard_repeat", REPEAT_HELP)
    parser.addini("lifeguard_report", REPORT_HELP)


def _raw_setting(config: pytest.Config, name: str) -> tuple[str | None, str, Path]:
    """(value, where it came from, the folder a relative path is relative to)."""
    value = config.getoption(f"lifeguard_{name}")
    if value is not None:
        return value, f"--lifeguard-{name} from command line", config.invocation_params.dir
    value = config.getini(f"lifeguard_{name}")
    if value:
        overrides = getattr(config.option, "override_ini", None) or []
        if any(o.split("=", 1)[0].strip() == f"lifeguard_{name}" for o in overrides):
            return str(value), f"lifeguard_{name} from -o", config.invocation_params.dir
        base = config.inipath.parent if config.inipath else config.rootpath
        return str(value), f"lifeguard_{name} from ini file", base
    return None, "", config.invocation_params.dir


def read_settings(config: pytest.Config) -> Settings:
    """The settings, checked; a bad value is a usage error naming its source."""
    try:
        timeout, source, _ = _raw_setting(config, "timeout")
        seconds = positive_number(timeout, source) if timeout is not None else None
        repeat, source, _ = _raw_setting(config, "repeat")
        runs = positive_whole_number(repeat, source) if repeat is not None else None
        report, source, base = _raw_setting(config, "report")
        folder = None
        if report is not None:
            if not report.strip():
                raise ValueError(f"{source}: an empty path")
            folder = (base / report).resolve()
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"{source}: {report!r} exists and is not a folder")
    except ValueError as exc:
        raise pytest.UsageError(f"lifeguard: {exc}") from None
    return Settings(timeout=seconds, repeat=runs, report_dir=folder)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.stash[SETTINGS_KEY] = read_settings(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings == Settings():
        return None
    parts = []
    if settings.timeout is not None:
        parts.append(f"timeout {settings.timeout:g} s")
    if settings.repeat is not None:
        parts.append(f"repeat {settings.repeat}")
    if settings.report_dir is not None:
        parts.append(f"reports in {settings.report_dir}")
    return "lifeguard: " + ", ".join(parts)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check a marked test before its fixtures are set up: a bad marker is a setup error."""
    marker = item.get_closest_marker("lifeguard")
    if marker is None:
        return
    import inspect

    from lifeguard import pytest_runner

    label = pytest_runner.label_of(item)
    if not isinstance(item, pytest.Function):
        pytest.fail(f"lifeguard: marker on {label}: only test functions can run in a fresh interpreter",
                    pytrace=False)
    function = item.function
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function) or \
            inspect.isgeneratorfunction(function):
        pytest.fail(f"lifeguard: marker on {label}: the body must be a plain function "
                    "(async and generator tests cannot run in a fresh interpreter)", pytrace=False)
    try:
        item.stash[MARKER_KEY] = pytest_runner.parse_marker(marker.args, marker.kwargs, label, sys.version_info[:2])
        return
    except pytest_runner.LifeguardUsageError as exc:
        problem = f"lifeguard: {exc}"
    pytest.fail(problem, pytrace=False)  # outside the except block: no chained traceback


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a marked test's body in fresh supervised interpreters instead of this process."""
    options = pyfuncitem.stash.get(MARKER_KEY, None)
    if options is None:
        return None
    from lifeguard import pytest_runner
    from lifeguard.errors import LifeguardError

    try:
        pytest_runner.run_marked_test(pyfuncitem, options, pyfuncitem.config.stash[SETTINGS_KEY])
        return True
    except pytest_runner.LifeguardUsageError as exc:
        problem = f"lifeguard: {exc}"
    except LifeguardError as exc:  # a fixture that does not build, a missing interpreter...
        problem = f"lifeguard: {exc}\n{exc.HELP_TEXT}".rstrip()
    pytest.fail(problem, pytrace=False)


@pytest.fixture
def lifeguard(request: pytest.FixtureRequest) -> LifeguardFixture:
    """Run code, a script, a module-level function or a probe in fresh supervised interpreters.

    Each call returns runs with ``assert_clean()``, ``assert_outcome("hung")`` and
    ``assert_finding(kind)``, whose failures show the evidence.
    """
    from lifeguard.pytest_runner import LifeguardFixture

    return LifeguardFixture(request.node, request.config.stash[SETTINGS_KEY])
