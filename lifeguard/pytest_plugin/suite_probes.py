"""Test-suite probes (``pytest --lifeguard --lifeguard-probe NAME``): a package's own tests as probes of it.

In a group's child (lifeguard.pytest_plugin.group_child), after each test that passed, the probe does one more
thing with what the test made: the test function's local variables as they were when it returned (its
arguments, the fixtures' values, are not the test's to drop). The child's supervision is the verdict: a crash
or a hang in the probe fails the test with the evidence, as one in the test's own body would.

- ``fork-finalize``: fork; the forked child drops what the test made and exits through normal finalization, so
  the objects' destructors run in a process without the threads they were made with;
- ``fork-rerun``: fork; the forked child runs the test again (its function-scoped fixtures set up again) and
  exits through normal finalization: a library whose threads, locks or pools do not survive a fork hangs or
  fails there. When the child's run fails, the test runs again here too, without a fork: a test that cannot
  run twice in one process (a parametrized stream read to its end) says nothing of the fork;
- ``gc-thread``: what the test made is dropped in reference cycles and collected on a new thread, the
  collector off elsewhere: destructors run on a thread that did not make the objects;
- ``gc-cycle``: the same cycles, collected on the main thread (each object meets ``tp_clear`` first when it is
  in the cycle itself).

A test that started processes of its own (a fork, subprocess) gets no fork probe: its own children would be
forked again. A probe that had nothing to work on says so (``WorkerLog.probed``): it never reads as a pass of
the probe.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import types
import warnings
from collections.abc import Generator
from typing import Any, cast

import pytest

from lifeguard.child import unpatched
from lifeguard.model.survey import FORK_PROBES
from lifeguard.pytest_plugin.worker_log import log_line
from lifeguard.run.fork_here import MULTI_THREADED_FORK

ALONE_REFERENCES = 2  # sys.getrefcount of an object only the probe holds: its list's reference and the call's
CYCLE_ATTRIBUTE = "_lifeguard_cycle"  # set on an object that takes attributes: the object is in the cycle itself
# Plain values a test leaves: nothing of a native library's lifetime is in them.
_PLAIN = (int, float, complex, str, bytes, bool, type(None), types.ModuleType, type, types.FunctionType,
          types.BuiltinFunctionType, types.MethodType)


class MadeByTest:
    """Registered in a group's child under a probe: keeps the local variables of each test function as it
    returned, and whether the test started processes of its own."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.spawned = 0
        os.register_at_fork(after_in_parent=self._forked)
        self._wrap_spawns()

    def _forked(self) -> None:
        self.spawned += 1

    def _wrap_spawns(self) -> None:
        """subprocess and os.posix_spawn start processes without Python's at-fork handlers: count them too."""
        import subprocess

        made = self
        execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

        def counted(popen: Any, *args: Any, **kwargs: Any) -> Any:
            made.spawned += 1
            return execute(popen, *args, **kwargs)

        subprocess.Popen._execute_child = counted  # type: ignore[attr-defined]
        for name in ("posix_spawn", "posix_spawnp"):
            spawn = getattr(os, name, None)
            if spawn is not None:
                setattr(os, name, self._counting(spawn))

    def _counting(self, spawn: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.spawned += 1
            return spawn(*args, **kwargs)

        return counted

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """The test function's locals at its (last) return, read by a profile function on this thread (a
        function's or a unittest TestCase method's: pytest runs the latter without pytest_pyfunc_call)."""
        code = getattr(getattr(item, "obj", None), "__code__", None)
        seen: dict[str, Any] = {}
        self.values = {}
        if code is None:
            return (yield)
        arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])

        def profile(frame: types.FrameType, event: str, arg: object) -> None:
            if event == "return" and frame.f_code is code:
                seen.clear()  # a coroutine returns at each await: its last return is its end
                seen.update((name, value) for name, value in frame.f_locals.items() if name not in arguments)

        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            return (yield)
        finally:
            sys.setprofile(previous)
            self.values = {name: value for name, value in seen.items() if not isinstance(value, _PLAIN)}
            seen.clear()

    def take(self) -> dict[str, Any]:
        values, self.values = self.values, {}
        return values


def passed(reports: list[pytest.TestReport]) -> bool:
    """Did the test pass (not skipped, not failed in any phase)?"""
    return bool(reports) and all(report.passed for report in reports) and any(r.when == "call" for r in reports)


def apply_probe(kind: str, item: pytest.Item, made: MadeByTest, spawned_before: int, log_fd: int,
                relays: tuple[int, int]) -> int | None:
    """Apply probe ``kind`` after ``item`` passed. None: carry on with the next test; a number: this is the
    probe's forked child, which ends now with that exit code (the body returns it)."""
    values = made.take()
    if kind in FORK_PROBES and made.spawned != spawned_before:
        log_line(log_fd, {"probed": item.nodeid, "probe": kind,
                          "skipped": "the test started processes of its own: a fork would copy them"})
        return None
    if kind != "fork-rerun" and not values:
        log_line(log_fd, {"probed": item.nodeid, "probe": kind, "skipped": "the test left no object to drop"})
        return None
    names = ", ".join(sorted(values))[:200]
    log_line(log_fd, {"probing": item.nodeid, "probe": kind})
    if kind in FORK_PROBES:
        return _fork(kind, item, made, values, names, log_fd, relays)
    freed = _collect_in_cycles(values, on_thread=kind == "gc-thread")
    where = "on thread lifeguard-gc" if kind == "gc-thread" else "on the main thread"
    log_line(log_fd, {"probed": item.nodeid, "probe": kind,
                      "did": f"dropped {names} in reference cycles; {freed} object(s) collected {where}"})
    return None


def _collect_in_cycles(values: dict[str, Any], *, on_thread: bool) -> int:
    """Each value reachable only from a reference cycle (the object itself in it when it takes attributes and
    nothing else holds it), then one collection, here or on a new thread while this one waits (the collector off
    meanwhile)."""
    for name in list(values):
        box: list[Any] = [values.pop(name)]
        # The box's reference and getrefcount's own: an object a cache or a fixture still holds never gets the
        # attribute (it would stay on it, in a cycle nothing collects, for the tests after).
        alone = sys.getrefcount(box[0]) <= ALONE_REFERENCES
        try:
            if not alone:
                raise TypeError
            setattr(box[0], CYCLE_ATTRIBUTE, box)
        except Exception:  # no attributes (or a type whose __setattr__ refuses): the list alone is the cycle
            box.append(box)
        del box
    if not on_thread:
        return gc.collect()
    freed = [0]
    enabled = gc.isenabled()
    gc.disable()
    try:
        collector = threading.Thread(target=lambda: freed.__setitem__(0, gc.collect()), name="lifeguard-gc")
        collector.start()
        collector.join()  # a collection that never ends is the finding: the test's deadline ends the run
    finally:
        if enabled:
            gc.enable()
    return freed[0]


def _fork(kind: str, item: pytest.Item, made: MadeByTest, values: dict[str, Any], names: str, log_fd: int,
          relays: tuple[int, int]) -> int | None:
    from lifeguard import child
    from lifeguard.child import protocol

    if kind == "fork-rerun":  # the objects of the first run are gone before the second, as in a plain process
        values.clear()
    with warnings.catch_warnings():  # lifeguard's own fork (Python 3.12+ warns of one with threads running)
        warnings.filterwarnings("ignore", MULTI_THREADED_FORK, DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, log_fd)  # the group's log is the parent's alone
        unpatched.close(null)
        _uncaptured(item.config, relays)
        if kind == "fork-finalize":
            values.clear()
            gc.collect()
            return 0
        return _run_again(item, made, relays[1])
    child.emit(protocol.FORK_CHILD, child=pid)
    # No bound here: the test's deadline is the run's, and the supervisor's. The interpreter's own waitpid: a
    # library's (gevent's) would wait in its event loop for news of the child that may never come.
    _, status = unpatched.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    values.clear()
    if code > 0 and kind == "fork-rerun" and _run_again(item, made, None) != 0:
        log_line(log_fd, {"probed": item.nodeid, "probe": kind, "skipped": (
            "run again in this process, without a fork, the test fails too: it cannot run twice in one process "
            "(a parametrized stream read to its end, a one-time setup), so its failure in the forked child "
            "says nothing of the fork")})
        return None
    if code != 0:
        child.emit(protocol.FORK_CHILD_EXIT, child=pid, status=code)
        return code if code > 0 else 1  # the group's child ends in this test: the supervisor's verdict is it
    done = "ran the test again" if kind == "fork-rerun" else f"dropped {names}"
    log_line(log_fd, {"probed": item.nodeid, "probe": kind,
                      "did": f"forked; the child {done} and exited through finalization (exit 0)"})
    return None


def _uncaptured(config: pytest.Config, relays: tuple[int, int]) -> None:
    """In the forked child: pytest's capture stops, and descriptors 1 and 2 are the run's relays, so what the
    library writes there as it fails (a message before it kills the process) is the run's evidence."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None and getattr(capture, "_global_capturing", None) is not None:
        from _pytest.capture import MultiCapture

        capture.stop_global_capturing()
        # A capture of nothing, where pytest expects one (private); capsys and capfd still capture as they do.
        capture._global_capturing = MultiCapture(in_=None, out=None, err=None)
    os.dup2(relays[0], 1)
    os.dup2(relays[1], 2)


def _run_again(item: pytest.Item, made: MadeByTest, err_fd: int | None) -> int:
    """The test's protocol once more, reported nowhere (its failure written to ``err_fd``, if given): 0 when it
    passed. Only the function's own fixtures are torn down after it (what is set up for later tests stays)."""
    from _pytest.runner import runtestprotocol

    # The teardown goes down to the test's parent: its function-scoped fixtures only.
    reports = runtestprotocol(item, log=False, nextitem=cast("pytest.Item", item.parent))
    # What the second run made dies as its frames end, as in a plain process: kept here, it would outlive the
    # interpreter's finalization (h5py's file over a BytesIO, closed by HDF5's C atexit, then crashed).
    made.take()
    failed = [report for report in reports if report.failed]
    if not failed:
        return 0
    if err_fd is None:
        return 1
    text = failed[0].longreprtext.strip().splitlines()[-20:]
    os.write(err_fd, ("lifeguard: run again in a forked child, the test failed in its "
                      f"{failed[0].when}:\n" + "\n".join(text) + "\n").encode(errors="backslashreplace"))
    return 1

