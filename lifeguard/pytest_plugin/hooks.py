"""lifeguard's pytest plugin: ``--lifeguard``, ``@pytest.mark.lifeguard`` and the ``lifeguard`` fixture.

Registered through the ``pytest11`` entry point; ``-p no:lifeguard`` switches it off. Under ``--lifeguard``
every test's body runs in a supervised child forked from this process after its fixtures are set up
(lifeguard.pytest_plugin.guard); a marked test's body runs in fresh supervised interpreters, each living a
whole process lifetime. Either way a crash in finalization or in a static destructor fails the test; the
test passes when every run ends as expected. Imports stay light here: the engine is loaded only once a
test is guarded, marked or uses the fixture.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from lifeguard.errors import LifeguardError, MarkerError, ReportDirError
from lifeguard.model.survey import SUITE_PROBES
from lifeguard.pytest_plugin.settings import (
    GUARD_HELP,
    KEEPER_HELP,
    MARKER_HELP,
    MODE_HELP,
    MODES,
    PROBE_HELP,
    REPEAT_HELP,
    REPORT_HELP,
    SETTINGS_KEY,
    SHARD_HELP,
    TIMEOUT_HELP,
    Settings,
    read_settings,
)

if TYPE_CHECKING:
    from collections.abc import Generator
    from pathlib import Path

    from lifeguard.pytest_plugin.fixture import LifeguardFixture
    from lifeguard.pytest_plugin.marker import MarkerOptions
    from lifeguard.pytest_plugin.session_report import SessionRecord


MARKER_KEY: pytest.StashKey[MarkerOptions] = pytest.StashKey()
RECORD_KEY: pytest.StashKey[SessionRecord] = pytest.StashKey()
PYTEST_TIMEOUT_KEY: pytest.StashKey[float] = pytest.StashKey()  # pytest-timeout's timeout of a guarded test
PLAN_KEY: pytest.StashKey[str] = pytest.StashKey()  # the collected tests' fingerprint (--lifeguard-shard)
NEXT_KEY: pytest.StashKey[str] = pytest.StashKey()  # under --lifeguard: the node id of the test run after this one


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    _spare_from_assertion_rewriting(pluginmanager)
    group = parser.getgroup("lifeguard", "lifeguard: lifetime bugs of native extensions")
    group.addoption("--lifeguard", action="store_true", default=False, dest="lifeguard_all", help=GUARD_HELP)
    group.addoption("--lifeguard-mode", dest="lifeguard_mode", choices=MODES, help=MODE_HELP)
    group.addoption("--lifeguard-timeout", dest="lifeguard_timeout", metavar="SECONDS", help=TIMEOUT_HELP)
    group.addoption("--lifeguard-repeat", dest="lifeguard_repeat", metavar="N", help=REPEAT_HELP)
    group.addoption("--lifeguard-report", dest="lifeguard_report", metavar="DIR", help=REPORT_HELP)
    group.addoption("--lifeguard-shard", dest="lifeguard_shard", metavar="K/N", help=SHARD_HELP)
    group.addoption("--lifeguard-probe", dest="lifeguard_probe", choices=tuple(SUITE_PROBES), help=PROBE_HELP)
    parser.addini("lifeguard", GUARD_HELP, type="bool", default=False)
    parser.addini("lifeguard_mode", MODE_HELP)
    parser.addini("lifeguard_timeout", TIMEOUT_HELP)
    parser.addini("lifeguard_repeat", REPEAT_HELP)
    parser.addini("lifeguard_report", REPORT_HELP)
    parser.addini("lifeguard_shard", SHARD_HELP)
    parser.addini("lifeguard_keeper", KEEPER_HELP, type="bool", default=True)


def _spare_from_assertion_rewriting(pluginmanager: pytest.PytestPluginManager) -> None:
    """lifeguard's own modules are not tests: take its package off pytest's list of modules whose asserts are
    rewritten. pytest puts every package of a plugin's distribution on it (an installed lifeguard, not an
    editable one), and rewriting parses and compiles a module at each import unless the result can be cached
    beside it: with PYTHONDONTWRITEBYTECODE (common in CI images), a read-only site-packages or the first
    session of a fresh CI job, that was about 0.1 s every session. pytest has no public way to take a name
    off the list, so this reads its hook's own set and does nothing where that is not what it expects (the
    modules are then rewritten, as before)."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    cache = getattr(hook, "_marked_for_rewrite_cache", None)
    package = __name__.partition(".")[0]
    if isinstance(marked, set) and isinstance(cache, dict) and package in marked:
        marked.discard(package)
        cache.clear()


def _claim(report_dir: Path) -> None:
    """--lifeguard-report DIR is lifeguard's (new, empty or an earlier session's) before anything in it is
    emptied; else a usage error, as any bad option value."""
    from lifeguard.report.files import claim_report_folder  # the report writers: only with a report folder

    try:
        claim_report_folder(report_dir, "--lifeguard-report")
    except ReportDirError as exc:
        raise pytest.UsageError(f"lifeguard: {exc}") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    settings = read_settings(config)
    report_dir = settings.report_dir
    if report_dir is not None:
        from lifeguard.pytest_plugin.session_report import WORKERS_FOLDER

        worker = getattr(config, "workerinput", {}).get("workerid")
        if worker is not None:  # a pytest-xdist worker: its own folder, merged by the controller at the end
            settings = replace(settings, report_dir=report_dir / WORKERS_FOLDER / worker)
        else:
            import shutil

            _claim(report_dir)
            shutil.rmtree(report_dir / WORKERS_FOLDER, ignore_errors=True)  # an earlier session's
    config.stash[SETTINGS_KEY] = settings
    if settings.guard_all:
        import resource  # noqa: F401  (a forked test's cores step needs it: imported once, here)

        from lifeguard.child import crash_park
        from lifeguard.child.forked_test import snapshot_harness
        from lifeguard.pytest_plugin.guard import note_harness_threads  # the engine, before the snapshot

        crash_park.prepare()  # every forked test parks its crashes: sigaction is found once, here

        # Before collection: what is loaded and running now is the harness's (pytest, its plugins, lifeguard's
        # engine); what the test modules import and start later is theirs, finalized in each forked test.
        snapshot_harness()
        note_harness_threads()


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    yield  # every plugin's start first (the terminal's header): a worker inherits it, printed once
    settings = session.config.stash.get(SETTINGS_KEY, None)
    if settings is not None and settings.guard_all:
        from lifeguard.child.forked_test import snapshot_harness_modules
        from lifeguard.pytest_plugin import keeper
        from lifeguard.pytest_plugin.session_report import WORKERS_FOLDER

        snapshot_harness_modules()  # what the plugins configured after lifeguard imported is the harness's too
        # A keeper guards the modes that run fixtures here; in groups this process runs no test's code at all.
        if settings.keeper and not settings.in_groups and keeper.keeps(session.config):
            keeper.start(session.config, settings.report_dir / WORKERS_FOLDER if settings.report_dir else None)


def _xdist_controller(config: pytest.Config) -> bool:
    """This process hands the tests to pytest-xdist workers (it runs none itself)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    return not hasattr(config, "workerinput") and bool(numprocesses) and getattr(config.option, "dist", "no") != "no"


def record_of(config: pytest.Config) -> SessionRecord:
    """The session's lifeguard record, made when the first guarded or marked test runs."""
    record = config.stash.get(RECORD_KEY, None)
    if record is None:
        from lifeguard.child.forked_test import harness_imports

        with harness_imports():  # pytest's tmp folder and the interpreter's description import modules
            record = config.stash[RECORD_KEY] = _new_record(config)
    return record


def _new_record(config: pytest.Config) -> SessionRecord:
    from lifeguard.pytest_plugin.session_report import SessionRecord
    from lifeguard.pytest_plugin.verdicts import interpreter

    settings = config.stash[SETTINGS_KEY]
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's tmp_path_factory (private attribute)
    if factory is not None:  # pytest rotates this tree: the last few sessions' evidence stays findable
        runs_root = factory.getbasetemp() / "lifeguard"
    else:  # -p no:tmpdir
        import tempfile
        from pathlib import Path

        runs_root = Path(tempfile.mkdtemp(prefix="lifeguard-pytest-"))
    from lifeguard.pytest_plugin.keeper import CONTINUED_KEY

    continued = config.stash.get(CONTINUED_KEY, False)
    record = SessionRecord(interpreter(), settings.report_dir, runs_root, fresh=not continued)
    record.as_shard(settings.shard, config.stash.get(PLAN_KEY, ""))
    return record


def pytest_collection_finish(session: pytest.Session) -> None:
    """The session's plan, for `lifeguard merge` of --lifeguard-shard sessions: the collected tests and the
    settings that decide their runs (each shard collects the same tests)."""
    from lifeguard.model.seeds import text_digest

    settings = session.config.stash.get(SETTINGS_KEY, None)
    if settings is None or (settings.shard is None and settings.report_dir is None):
        return
    text = "\n".join(sorted(item.nodeid for item in session.items))
    text += repr((settings.repeat, settings.timeout, settings.mode.value, settings.guard_all))
    session.config.stash[PLAN_KEY] = text_digest(text, 16)


def _opted_out(item: pytest.Item) -> bool:
    from lifeguard.pytest_plugin.marker import opts_out

    marker = item.get_closest_marker("lifeguard")
    return marker is not None and opts_out(marker.args, marker.kwargs)


def _guarded(item: pytest.Item) -> bool:
    """Does lifeguard run this test's body (marked, or under --lifeguard and not opted out)?"""
    marker = item.get_closest_marker("lifeguard")
    if marker is not None:
        return not _opted_out(item)
    settings = item.config.stash.get(SETTINGS_KEY, None)
    return settings is not None and settings.guard_all


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object) -> bool | None:
    """pytest-timeout asks before it arms its timer: a guarded test's timeout becomes its lifeguard deadline
    (the smaller one wins) and no timer of pytest-timeout's runs in this process, so it can neither kill
    the supervisor nor leave the child behind."""
    if not _guarded(item):
        return None
    timeout = getattr(settings, "timeout", None)
    if isinstance(timeout, (int, float)) and timeout > 0:
        item.stash[PYTEST_TIMEOUT_KEY] = float(timeout)
    return True


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    return True if _guarded(item) else None


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings == Settings():
        return None
    parts = []
    if settings.guard_all:
        parts.append(f"every test guarded (mode {settings.mode})")
    if settings.probe is not None:
        parts.append(f"probe {settings.probe} after each test that passed")
    if settings.debugger:
        parts.append(f"{settings.debugger}: unmarked tests run in pytest's process, unguarded, so that the debugger "
                     "stops in them")
    if settings.timeout is not None:
        parts.append(f"timeout {settings.timeout:g} s")
    if settings.repeat is not None:
        parts.append(f"repeat {settings.repeat}")
    if settings.shard is not None:
        parts.append(f"shard {settings.shard[0]}/{settings.shard[1]}")
    if settings.report_dir is not None:
        parts.append(f"report in {settings.report_dir}")
    return "lifeguard: " + ", ".join(parts)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Under --lifeguard in group mode, the test is held and run with others in one child
    (lifeguard.pytest_plugin.groups); a test that is not (a marked one, one opted out) runs after the held
    ones. In the other modes, note the next test: its evidence folder is made while this test's child runs."""
    settings = item.config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.guard_all:
        return None
    if settings.in_groups:
        from lifeguard.pytest_plugin.groups import runner_of  # the engine: only for guarded tests

        runner = runner_of(item.config, settings, record_of(item.config))
        if item.get_closest_marker("lifeguard") is not None:
            runner.flush()
            return None
        try:
            runner.add(item, nextitem, item.stash.get(PYTEST_TIMEOUT_KEY, None))
        except LifeguardError as exc:  # a run lifeguard could not start: the session's error, with the fix
            raise pytest.UsageError(f"lifeguard: {exc}\n{exc.HELP_TEXT}".rstrip()) from None
        return True
    if nextitem is not None:
        item.stash[NEXT_KEY] = nextitem.nodeid
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check a marked test before its fixtures are set up: a bad marker is a setup error."""
    marker = item.get_closest_marker("lifeguard")
    if marker is None or _opted_out(item):
        return

    from lifeguard.pytest_plugin.marker import is_plain_body, label_of, parse_marker  # light: no engine

    label = label_of(item)
    if not isinstance(item, pytest.Function):
        pytest.fail(f"lifeguard: marker on {label}: only test functions can run in a fresh interpreter",
                    pytrace=False)
    if not is_plain_body(item.function):
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
        run_marked_test(pyfuncitem, options, pyfuncitem.config.stash[SETTINGS_KEY], record_of(pyfuncitem.config),
                        pytest_timeout=pyfuncitem.stash.get(PYTEST_TIMEOUT_KEY, None))
        return True
    except MarkerError as exc:
        problem = f"lifeguard: {exc}"
    except LifeguardError as exc:  # a fixture that does not build, a missing interpreter...
        problem = f"lifeguard: {exc}\n{exc.HELP_TEXT}".rstrip()
    pytest.fail(problem, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """A forked test that failed as it would have here is reported as pytest reported it in the child (its
    assertion line in the short summary and in JUnit, its source as pytest shows it)."""
    report = yield
    own = getattr(call.excinfo.value, "lifeguard_longrepr", None) if call.excinfo is not None else None
    if own is not None:
        report.longrepr = own  # type: ignore[attr-defined]
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Under --lifeguard, an unmarked test's ``runtest()`` (pytest calls it next) runs in a supervised child:
    the item's own method is swapped for the guard for the length of this call."""
    settings = item.config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.guard_all or item.get_closest_marker("lifeguard") is not None:
        return (yield)
    if settings.in_groups:  # this is a group's child: the test runs here, as in plain pytest
        return (yield)
    from lifeguard.pytest_plugin.guard import run_guarded  # the engine: only for guarded tests

    original = item.runtest
    record = record_of(item.config)
    timeout = item.stash.get(PYTEST_TIMEOUT_KEY, None)

    def guarded() -> None:
        problem = ""
        try:
            run_guarded(item, original, settings, record, pytest_timeout=timeout,
                        next_test=item.stash.get(NEXT_KEY, None))
            return
        except LifeguardError as exc:  # a run lifeguard could not start: the test's error, with the fix
            problem = f"lifeguard: {exc}\n{exc.HELP_TEXT}".rstrip()
        pytest.fail(problem, pytrace=False)

    item.runtest = guarded  # type: ignore[method-assign]
    try:
        return (yield)
    finally:
        del item.runtest  # the class's method again


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is not None and settings.report_dir is not None:
        from lifeguard.pytest_plugin.session_report import WORKERS_FOLDER

        workers = settings.report_dir / WORKERS_FOLDER  # pytest-xdist's, or crashed workers' (keeper)
        if _xdist_controller(config) or (not hasattr(config, "workerinput") and workers.is_dir()):
            record_of(config).merge_workers(workers)
    record = config.stash.get(RECORD_KEY, None)
    if record is not None:
        record.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    record = terminalreporter.config.stash.get(RECORD_KEY, None)
    if record is not None and record.report_dir is not None:
        terminalreporter.write_line(f"lifeguard: report of {record.session.finished} run(s) in {record.report_dir}")


@pytest.fixture
def lifeguard(request: pytest.FixtureRequest) -> LifeguardFixture:
    """Run code, a script, a module-level function or a probe in fresh supervised interpreters.

    Each call returns runs with ``assert_clean()``, ``assert_outcome("hung")`` and
    ``assert_finding(kind)``, whose failures show the evidence.
    """
    from lifeguard.pytest_plugin.fixture import LifeguardFixture  # the engine: only for tests that use it

    return LifeguardFixture(request.node, request.config.stash[SETTINGS_KEY], record_of(request.config))
