"""What the pytester-based tests of the pytest plugin share (PYTEST_DONT_REWRITE: it holds no asserts).

The plugin is found the way pip-installed lifeguard is found: through its
``pytest11`` entry point. A checkout need not be installed for that: the
``plugin_env`` fixture puts a distribution record declaring the same entry
point on the import path of the inner pytest runs (a second record of an
installed lifeguard is skipped by pytest, which loads an entry point once).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# In-process inner sessions share this process's modules, and pytester drops
# the ones a session imported when it ends: load the plugin's engine side now,
# so every inner session finds it loaded instead of importing it again.
import lifeguard.pytest_plugin.runner  # noqa: F401
from lifeguard.build import cache_dir
from tests.helpers import ROOT

# pytester points HOME at a temporary folder: keep the real build cache, so
# fixtures compile once per session, not once per test.
REAL_CACHE = str(cache_dir())
# Bounds of one inner pytest session (each of its runs has its own deadline).
INNER_SESSION_TIMEOUT = 120.0

# Other plugins of this environment stay out of the inner sessions (hypothesis
# alone costs a second per in-process session); unknown names are ignored.
INNER_ADDOPTS = "-p no:hypothesispytest -p no:benchmark -p no:cacheprovider"

ENTRY_POINTS = "[pytest11]\nlifeguard = lifeguard.pytest_plugin.hooks\n"
METADATA = "Metadata-Version: 2.1\nName: lifeguard-checkout\nVersion: 0.0\n"


@pytest.fixture(scope="session")
def entry_point_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("entry-point")
    record = folder / "lifeguard_checkout-0.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text(METADATA)
    (record / "entry_points.txt").write_text(ENTRY_POINTS)
    return folder


@pytest.fixture
def plugin_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, entry_point_dir: Path) -> pytest.Pytester:
    """A pytester whose inner sessions (in-process and subprocess) load lifeguard's plugin by its entry point."""
    paths = [str(entry_point_dir), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("LIFEGUARD_CACHE", REAL_CACHE)
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    monkeypatch.syspath_prepend(str(entry_point_dir))
    return pytester


def junit_cases(path: Path) -> dict[str, ET.Element]:
    """testcase name -> element of a JUnit XML file."""
    tree = ET.parse(path)
    return {case.get("name", ""): case for case in tree.iter("testcase")}


def properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
