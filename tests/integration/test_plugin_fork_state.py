"""What a forked test leaves in the pytest process and in the next test's run (pytester, real forks): the
pytest process's garbage collector is left as plain pytest has it, a run folder made of a passed run's keeps
nothing of it, and the evidence of failed runs stays in each test's own folder; and what the pytest process
itself pays for the plugin: no engine for passing tests, no assertion rewriting of lifeguard's modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.pytester_support import INNER_SESSION_TIMEOUT

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

# A reference cycle made in the pytest process before each test's fork, with automatic collections off so
# only the explicit young collection after the test can free it. A freeze of the pytest process's heap at the
# fork, thawed after it, moved the cycle to the oldest generation, where a young collection never looks.
YOUNG_CYCLE = """
import gc
import weakref

import pytest

gc.disable()
freed = []


class Node:
    pass


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    node = Node()
    node.itself = node
    item.stash[KEY] = weakref.ref(node)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    gc.collect(1)
    freed.append(item.stash[KEY]() is None)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"young cycles freed: {{freed}}; frozen now: {{gc.get_freeze_count()}}")


KEY = pytest.StashKey()
"""


# In the child: the inherited heap frozen, the collector on or off as the pytest process had it.
FROZEN_CHILD = """
import gc


def test_one():
    assert gc.get_freeze_count() > 0 and gc.isenabled() is {enabled}


def test_two():
    pass
"""


def test_the_pytest_process_collects_its_young_cycles_as_plain_pytest_does(plugin_env: pytest.Pytester) -> None:
    plugin_env.makeconftest(YOUNG_CYCLE.format())
    plugin_env.makepyfile(test_frozen=FROZEN_CHILD.format(enabled=False))  # the conftest turned it off
    result = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", "fork", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["young cycles freed: [True, True]; frozen now: 0"])


def test_a_forked_test_has_the_collector_on_as_pytest_s_process_has_it(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_frozen=FROZEN_CHILD.format(enabled=True))
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)


# Each test writes to descriptor 1 (as native code does): what a run's stdout.txt holds is its own output.
TALKERS = """
import os


def test_a_talks_and_passes():
    os.write(1, b"from the first test\\n")


def test_b_talks_and_fails():
    os.write(1, b"from the second test\\n")
    assert False


def test_c_talks_and_fails_too():
    os.write(1, b"from the third test\\n")
    assert False
"""


def test_a_run_folder_made_of_a_passed_run_s_keeps_nothing_of_it(plugin_env: pytest.Pytester) -> None:
    plugin_env.makepyfile(test_talkers=TALKERS)
    result = plugin_env.runpytest_subprocess("--lifeguard", "--lifeguard-mode", "fork", "--lifeguard-report", "out",
                                             timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1, failed=2)
    runs = plugin_env.path / "out" / "runs" / "test_talkers.py"
    assert not (runs / "test_a_talks_and_passes" / "run-1").exists()  # a passed run keeps no folder
    second = runs / "test_b_talks_and_fails" / "run-1"
    third = runs / "test_c_talks_and_fails_too" / "run-1"
    assert (second / "stdout.txt").read_text() == "from the second test\n"
    assert (third / "stdout.txt").read_text() == "from the third test\n"
    for folder in (second, third):  # each its own result channel, failure text and nothing else of another's
        assert "pytest-failure.txt" in {path.name for path in folder.iterdir()}
        assert "from the first test" not in (folder / "stdout.txt").read_text()
        # The dump file a passed run left is taken by the next run's process as its own: one, named for it.
        dumps = [path.name for path in folder.iterdir() if path.name.startswith(("faulthandler-", "dump-spare"))]
        assert len(dumps) == 1 and dumps[0].startswith("faulthandler-"), dumps


# Each path finder the test process has is watched by a weak reference it holds itself, whose callback writes
# to a file when the finder is freed (in the child's finalization, where nothing else can see it). The test
# also imports from a folder of its own, whose new finder is the test's. (The callback holds what it calls: the
# test module's globals are cleared before the finders are freed.)
FINDER_WATCH = """
import os
import sys
import weakref


def test_watch_the_finders(tmp_path):
    log = os.open({log!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    own = tmp_path / "own"
    own.mkdir()
    (own / "own_module.py").write_text("")
    sys.path.insert(0, str(own))
    import own_module  # noqa: F401
    for path, finder in list(sys.path_importer_cache.items()):
        if finder is not None and hasattr(finder, "__dict__"):
            data = (("own " if path == str(own) else "harness ") + path + "\\n").encode()
            finder.lifeguard_watch = weakref.ref(finder, lambda _, data=data, write=os.write: write(log, data))
"""


def test_a_forked_test_s_finalization_frees_its_own_path_finders_not_pytest_s(plugin_env: pytest.Pytester) -> None:
    log = plugin_env.path / "freed.txt"
    plugin_env.makepyfile(test_finders=FINDER_WATCH.format(log=str(log)))
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1)
    freed = log.read_text().splitlines()
    assert [line for line in freed if line.startswith("own ")], freed  # the finalization did free the test's
    assert not [line for line in freed if line.startswith("harness ")], freed


# What the pytest process imported once its guarded tests all passed, written at the session's end.
MODULES_AT_END = """
import sys


def pytest_sessionfinish(session):
    with open({path!r}, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""


def test_a_guarded_session_that_passes_loads_no_engine_in_the_pytest_process(plugin_env: pytest.Pytester) -> None:
    """Every module the pytest process holds is copied, dropped and partly finalized by every forked test."""
    listing = plugin_env.path / "modules.txt"
    plugin_env.makeconftest(MODULES_AT_END.format(path=str(listing)))
    plugin_env.makepyfile(test_frozen=FROZEN_CHILD.format(enabled=True))
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=2)
    loaded = set(listing.read_text().split())
    assert "lifeguard.run.fork_here" in loaded  # the tests did run forked
    heavy = {"lifeguard.run.engine", "lifeguard.session.setup", "lifeguard.plan.scheduler", "lifeguard.report.terminal",
             "lifeguard.diagnose", "lifeguard.capture.native", "lifeguard.pytest_plugin.runner"}
    assert not heavy & loaded, sorted(heavy & loaded)


LOADERS_AT_END = """
import sys


def pytest_sessionfinish(session):
    with open({path!r}, "w") as f:
        for name, module in sorted(sys.modules.items()):
            if name.startswith("lifeguard"):
                f.write(f"{{name}} {{type(getattr(module, '__loader__', None)).__name__}}\\n")
"""


def test_an_installed_lifeguard_is_not_assertion_rewritten(plugin_env: pytest.Pytester, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest rewrites the asserts of every package of a plugin's installed distribution, parsing and compiling
    each module at every import where no cache can be written (PYTHONDONTWRITEBYTECODE): ~0.1 s a session.
    The record below lists lifeguard's files as a wheel's does, so pytest marks the package as it would."""
    record = tmp_path / "installed" / "lifeguard_installed-0.0.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: lifeguard-installed\nVersion: 0.0\n")
    (record / "entry_points.txt").write_text("[pytest11]\nlifeguard = lifeguard.pytest_plugin.hooks\n")
    (record / "RECORD").write_text("lifeguard/__init__.py,,\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(record.parent), os.environ["PYTHONPATH"]]))
    listing = plugin_env.path / "loaders.txt"
    plugin_env.makeconftest(LOADERS_AT_END.format(path=str(listing)))
    plugin_env.makepyfile(test_plain="def test_passes():\n    pass\n")
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1)
    loaders = dict(line.split() for line in listing.read_text().splitlines())
    assert loaders["lifeguard.pytest_plugin.hooks"] == "AssertionRewritingHook"  # pytest did mark the package
    for name in ("lifeguard.run.fork_here", "lifeguard.run.supervise", "lifeguard.pytest_plugin.guard"):
        assert loaders[name] == "SourceFileLoader", loaders
