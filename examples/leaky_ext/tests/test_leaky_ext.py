"""leaky_ext's test suite, guarded by lifeguard.

leaky_ext keeps Python callbacks in a native registry that a C destructor
empties when the library unloads, after the interpreter has finalized. Every
assertion below holds in-process; the bug shows only when the process exits,
after pytest reported success. The lifeguard marker runs a test's body in a
fresh interpreter that exits on its own, so that exit is part of the test.

The extension is built from fixtures_native/leaky_ext/ by lifeguard, in two
variants of the same source: "buggy" (as shipped) and "fixed" (-DLIFEGUARD_FIXED=1).
Import it inside the bodies: the pytest process itself never loads it.
"""

from __future__ import annotations

from typing import Any

import pytest

BUILDS = [pytest.param(variant, id=variant, marks=pytest.mark.lifeguard(fixture="leaky_ext", variant=variant))
          for variant in ("buggy", "fixed")]


@pytest.mark.parametrize("build", BUILDS)
def test_listeners_run_and_the_process_exits_cleanly(build: str) -> None:
    """Fails on the buggy build (a crash after finalization), passes on the fixed one."""
    import leaky_ext

    calls: list[str] = []
    leaky_ext.on_shutdown(lambda: calls.append(build))
    leaky_ext.run_listeners()
    assert calls == [build]
    assert leaky_ext.listener_count() == 1


@pytest.mark.lifeguard(fixture="leaky_ext", expect={"buggy": "crashed@exit", "fixed": "passed"}, repeat=2)
def test_the_exit_crash_is_reproduced() -> None:
    """The regression test: the buggy build must crash at exit, every time; the fixed one never."""
    import leaky_ext

    leaky_ext.on_shutdown(lambda: None)


def register_listener(module: Any) -> None:
    """A probe hook: use the module as an application would."""
    module.on_shutdown(lambda: None)


def test_exit_probe_finds_the_bug(lifeguard: Any) -> None:
    """`lifeguard probe leaky_ext --probe exit --hook ...`, from a test: buggy crashes at exit, fixed passes."""
    buggy = lifeguard.probe("leaky_ext", "exit", hook=register_listener, paths=[lifeguard.build("leaky_ext", "buggy")])
    buggy.assert_outcome("crashed@exit")
    fixed = lifeguard.probe("leaky_ext", "exit", hook=register_listener, paths=[lifeguard.build("leaky_ext", "fixed")])
    fixed.assert_clean()


def listeners_released_in_atexit() -> None:
    """Runs in a fresh interpreter: releasing by hand before exit is the workaround for the buggy build."""
    import atexit

    import leaky_ext

    leaky_ext.on_shutdown(lambda: None)
    atexit.register(leaky_ext.release_listeners)


def test_workaround_releases_before_exit(lifeguard: Any) -> None:
    """The fixture runs a module-level function on both builds; both exit cleanly."""
    lifeguard.run_function(listeners_released_in_atexit, fixture="leaky_ext").assert_clean()
