"""lifeguard.child.forked_test's record of the harness's modules (taken out of sys.modules in a forked test,
so its exit does not finalize them): the snapshot, and what lifeguard imports later in the pytest process."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from lifeguard.child import forked_test


@pytest.fixture
def fresh_snapshot() -> Iterator[None]:
    saved = (list(forked_test._harness), list(forked_test._core), set(forked_test._harness_packages))
    try:
        yield
    finally:
        forked_test._harness[:], forked_test._core[:] = saved[0], saved[1]
        forked_test._harness_packages.clear()
        forked_test._harness_packages.update(saved[2])


def _import_fresh(name: str) -> None:
    sys.modules.pop(name, None)
    __import__(name)


def test_the_snapshot_splits_the_harness_from_the_modules_the_exit_runs_on(fresh_snapshot: None) -> None:
    forked_test.snapshot_harness_modules()
    harness, core = set(forked_test._harness[0]), set(forked_test._core[0])
    assert "pytest" in harness and "lifeguard.child.forked_test" in harness
    assert "os" in core and "os.path" in core and "threading" in core  # taken out only after atexit
    assert not harness & core
    assert not (harness | core) & forked_test.FINALIZED  # finalized as in any process


def test_what_lifeguard_imports_later_is_the_harness_s_and_what_a_test_imports_is_not(fresh_snapshot: None) -> None:
    forked_test.snapshot_harness_modules()
    with forked_test.harness_imports():
        _import_fresh("tabnanny")  # as the session record's first use imports getpass or sysconfig
    _import_fresh("colorsys")  # as a test module would
    assert "tabnanny" in forked_test._harness[0]
    assert "colorsys" not in forked_test._harness[0]
