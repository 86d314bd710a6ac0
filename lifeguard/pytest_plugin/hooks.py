"""lifeguard's pytest plugin: ``@pytest.mark.lifeguard`` and the ``lifeguard`` fixture.

Registered through the ``pytest11`` entry point; ``-p no:lifeguard`` switches it
off. A marked test's body runs in fresh supervised interpreters, each living a
whole process lifetime (so a crash in finalization or in a static destructor
fails the test); the test passes when every run ends as the marker expects.
Imports stay light here: the engine is loaded only by a test that uses the
marker or the fixture.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from lifeguard.errors import LifeguardError, MarkerError
from lifeguard.pytest_plugin.settings import (
    MARKER_HELP,
    REPEAT_HELP,
    REPORT_HELP,
    SETTINGS_KEY,
    TIMEOUT_HELP,
    Settings,
    read_settings,
)

if TYPE_CHECKING:
    from lifeguard.pytest_plugin.fixture import LifeguardFixture
    from lifeguard.pytest_plugin.marker import MarkerOptions


MARKER_KEY: pytest.StashKey[MarkerOptions] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lifeguard", "lifeguard: lifetime bugs of native extensions")
    group.addoption("--lifeguard-timeout", dest="lifeguard_timeout", metavar="SECONDS", help=TIMEOUT_HELP)
    group.addoption("--lifeguard-repeat", dest="lifeguard_repeat", metavar="N", help=REPEAT_HELP)
    group.addoption("--lifeguard-report", dest="lifeguard_report", metavar="DIR", help=REPORT_HELP)
    parser.addini("lifeguard_timeout", TIMEOUT_HELP)
    parser.addini("lifeguard_repeat", REPEAT_HELP)
    parser.addini("lifeguard_report", REPORT_HELP)


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

    from lifeguard.pytest_plugin.marker import label_of, parse_marker  # light: no engine

    label = label_of(item)
    if not isinstance(item, pytest.Function):
        pytest.fail(f"lifeguard: marker on {label}: only test functions can run in a fresh interpreter",
                    pytrace=False)
    function = item.function
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function) or \
            inspect.isgeneratorfunction(function):
        pytest.fail(f"lifeguard: marker on {label}: the body must be a plain function "
                    "(async and generator tests cannot run in a fresh interpreter)", pytrace=False)
    try:
        item.stash[MARKER_KEY] = parse_marker(marker.args, marker.kwargs, label, sys.version_info[:2])
        return
    except MarkerError as exc:
        problem = f"lifeguard: {exc}"
    pytest.fail(problem, pytrace=False)  # outside the except block: no chained traceback


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a marked test's body in fresh supervised interpreters instead of this process."""
    options = pyfuncitem.stash.get(MARKER_KEY, None)
    if options is None:
        return None
    from lifeguard.pytest_plugin.runner import run_marked_test  # the engine: only for marked tests

    try:
        run_marked_test(pyfuncitem, options, pyfuncitem.config.stash[SETTINGS_KEY])
        return True
    except MarkerError as exc:
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
    from lifeguard.pytest_plugin.fixture import LifeguardFixture  # the engine: only for tests that use it

    return LifeguardFixture(request.node, request.config.stash[SETTINGS_KEY])
