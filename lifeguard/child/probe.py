"""Probe bodies, run inside a supervised child: one per probe mode, for any importable module.

Each probe imports the module (phase ``import``), drives it through the user's hook (phase ``run``) and
returns, so the process exits through normal finalization (phase ``exit``). The hook is ``hook(module)`` or
``hook(module, probe)``: ``probe`` is the run's ProbeContext (also ``lifeguard.child.probe.context()``), whose
``callback(*objects)`` makes a Python callable for the hook to hand to native code. What the hook returns is the
probe's to keep alive or to drop. An optional check runs last, on the main thread, to look at state only the
module can see (it raises, or calls ``lifeguard.child.report_corruption``).

Each probe records what it did with the module (protocol.PROBE_EXERCISED): the module's native functions and
methods the hook called, and its package's Python functions entered from outside it (seen by a profile
function while the hook runs), and how many of the native calls raised, the callbacks
native code called, the objects returned (and how many are the module's), the native threads before and after.
A probe whose hook made no call of the module that returned, returned none of its objects and had no callback
called exercised nothing: its process exits with NOT_EXERCISED_STATUS right after the record, never a clean
pass (the run is ``not exercised``: lifeguard.run.classify).

The fork probes fork while the hook's threads are busy, by child.fork_schedule: they wait until every thread the
hook started has run (its CPU time or context switches in /proc), then fork FORKS times, one child at a time, at
random moments over FORK_WINDOW seconds (the run's seed picks them): a thread that holds a lock most of the time
is caught holding it. Each fork's FORK_CHILD event says which threads were alive and in what state.

A forked child is waited for up to its own deadline (shorter than the run's); past it the parent notes so and
keeps waiting, never kills it: the supervisor captures the hung child's stacks (phase ``fork-child``).
"""

from __future__ import annotations

import gc
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from lifeguard import child
from lifeguard.child import protocol, unpatched
from lifeguard.child.exercise import Exercise, native_thread_count
from lifeguard.child.fork_schedule import (
    FORK_WINDOW,
    FORKS,
    THREADS_RUN_WAIT,
    fork_moments,
    threads_seen,
    wait_until_ran,
)
from lifeguard.child.pytest_body import extend_sys_path, load_callable
from lifeguard.child.readable import readable

# How long the collector thread may take to notice it should stop.
COLLECTOR_JOIN_SECONDS = 5.0
# The gc-thread collector sleeps this long between collections: back-to-back collections held the GIL so
# much that a hook still importing on the main thread starved (4 of 5 gc-thread failures of a survey were that).
COLLECTOR_PAUSE = 0.002
CO_VARARGS = 0x04
# A probe that exercised nothing ends its process with this status and no traceback: nothing failed, and
# its PROBE_EXERCISED event says why (run.classify makes the run "not exercised").
NOT_EXERCISED_STATUS = 1
# What the probes keep alive: objects the hook returned are destroyed by the interpreter's finalization, as a
# real program's would be (the onnxruntime incident's pool was alive until exit()).
_kept_until_exit: list[Any] = []


class ProbeContext:
    """What a hook gets as its second argument: the probe mode, and callables for native code to keep."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "exit", "fork-use", "fork-finalize", "fork-exit", "gc-thread", "gc-cycle"
        self.pid = os.getpid()
        self.callbacks_made = 0
        self.calls = 0

    @property
    def forked(self) -> bool:
        """True in a probe's forked child."""
        return os.getpid() != self.pid

    def callback(self, *objects: Any) -> Callable[..., Any]:
        """A Python function closing over ``objects`` (kept alive as long as the function is), for the hook to
        hand to native code as a callback: called, it touches them and returns how many there are. The exit
        probe thus finds native code that keeps Python callbacks past finalization."""
        self.callbacks_made += 1

        def probe_callback(*args: Any, **kwargs: Any) -> int:
            self.calls += 1
            return len([type(item) for item in objects])

        return probe_callback


_context: ProbeContext | None = None


def context() -> ProbeContext:
    """The running probe's context (for a one-argument hook that still wants ``callback()``)."""
    if _context is None:
        raise RuntimeError("no probe is running in this process")
    return _context


def _takes_context(hook: Callable[..., Any]) -> bool:
    func = getattr(hook, "__func__", hook)
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    bound = 1 if func is not hook else 0
    return bool(code.co_flags & CO_VARARGS) or code.co_argcount - bound >= 2


class Probe:
    """The target module, the hook that exercises it, and the probe bodies."""

    def __init__(self, config: dict[str, Any]) -> None:
        extend_sys_path(list(config.get("paths", ())))
        self.name = config["module"]
        self.module = importlib.import_module(self.name)
        self.hook = load_callable(config["hook"]) if config.get("hook") else None
        self.check = load_callable(config["check"]) if config.get("check") else None
        self.timeout = float(config["timeout"])
        self.fork_child_timeout = float(config.get("fork_child_timeout", self.timeout / 2))
        self.gc_rounds = int(config["gc_rounds"])
        self.gc_seconds = float(config["gc_seconds"])
        self.forks = int(config.get("forks", FORKS))
        self.fork_window = float(config.get("fork_window", FORK_WINDOW))
        self.with_context = self.hook is not None and _takes_context(self.hook)
        self.exercise: Exercise | None = None
        self._hook_returned = 0.0
        self._child = 0  # the forked child of a fork probe

    def _start(self, kind: str) -> None:
        global _context
        _context = ProbeContext(kind)
        self.exercise = Exercise(self.module, self.hook)

    def _call_hook(self) -> Any:
        if self.hook is None:
            return None
        return self.hook(self.module, context()) if self.with_context else self.hook(self.module)

    def _exercise(self) -> Any:
        """The hook, once; in the probe's own process, counted (a forked child's use is its own)."""
        if self.exercise is None or context().forked:
            return self._call_hook()
        made = self.exercise.call(self._call_hook)
        self._hook_returned = self._hook_returned or time.monotonic()  # the first call's return: forks count from it
        return made

    def _report(self) -> None:
        """PROBE_EXERCISED; when the hook used nothing of the module, the process ends here (no check, no fork)."""
        assert self.exercise is not None
        record = self.exercise.record(context().kind, self.hook is not None, context().calls)
        child.emit(protocol.PROBE_EXERCISED, **record)
        if not record["exercised"]:
            raise SystemExit(NOT_EXERCISED_STATUS)

    def _check(self) -> None:
        if self.check is not None:
            self.check(self.module)

    def exit(self) -> None:
        """Use the module, keep what it made (and the callbacks it was handed), let the interpreter finalize it."""
        self._start("exit")
        _kept_until_exit.append(self._exercise())
        self._report()
        self._check()

    def fork_use(self) -> None:
        """The module's threads run; fork; the child uses the module and exits normally."""
        self._start("fork-use")
        _kept_until_exit.append(self._exercise())
        self._let_threads_run()
        self._report()
        for number in self._fork_moments():
            if self._fork() == 0:
                _kept_until_exit.append(self._exercise())
                self._check()
                return  # this process too exits through normal finalization
            if number == 0:
                _kept_until_exit.append(self._exercise())  # the parent's module still works
            self._join_child()
        self._check()

    def fork_finalize(self) -> None:
        """Fork; the child never calls the module: it drops what it inherited and finalizes normally, so the
        inherited objects' destructors run in a process without the parent's threads."""
        self._start("fork-finalize")
        _kept_until_exit.append(self._exercise())
        self._let_threads_run()
        self._report()
        for _ in self._fork_moments():
            if self._fork() == 0:
                _kept_until_exit.clear()
                gc.collect()
                return
            self._join_child()
        self._check()

    def fork_exit(self) -> None:
        """Fork; the child leaves at once with os._exit(0): only the atfork handlers run in it."""
        self._start("fork-exit")
        _kept_until_exit.append(self._exercise())
        self._let_threads_run()
        self._report()
        for _ in self._fork_moments():
            if self._fork() == 0:
                os._exit(0)
            self._join_child()
        self._check()

    def gc_thread(self) -> None:
        """After a warm-up call on the main thread, objects of the module die in cycles collected on a foreign
        thread while the owner keeps using the module."""
        self._start("gc-thread")
        self._exercise()  # the warm-up: first-call imports and set-up happen before the collector starts
        stop = threading.Event()
        freed = [0]

        def collect_until_stopped() -> None:
            while not stop.wait(COLLECTOR_PAUSE):
                freed[0] += gc.collect()

        # The collector thread is the only one that collects: every cycle the
        # owner drops dies there (TVM Disco: DRefs freed by a server thread's gc).
        gc.disable()
        collector = threading.Thread(target=collect_until_stopped, name="lifeguard-gc", daemon=True)
        collector.start()
        try:
            rounds = self._drop_rounds(lambda: None)
        finally:
            stop.set()
            collector.join(COLLECTOR_JOIN_SECONDS)
            gc.enable()
        if collector.is_alive():
            raise TimeoutError(f"the collector thread did not stop within {COLLECTOR_JOIN_SECONDS} s")
        child.note(f"gc-thread probe: {rounds} round(s), {freed[0]} object(s) collected on thread lifeguard-gc")
        self._report()
        self._check()

    def gc_cycle(self) -> None:
        """The hook's objects are dropped inside reference cycles and collected on the main thread (each object
        meets tp_clear before its destructor, as only a collection does)."""
        self._start("gc-cycle")
        freed = [0]

        def collect() -> None:
            freed[0] += gc.collect()

        rounds = self._drop_rounds(collect)
        child.note(f"gc-cycle probe: {rounds} round(s), {freed[0]} object(s) collected on the main thread")
        self._report()
        self._check()

    def _drop_rounds(self, after_each: Callable[[], None]) -> int:
        rounds = 0
        deadline = time.monotonic() + self.gc_seconds
        while rounds < self.gc_rounds and time.monotonic() < deadline:
            _drop_on_a_cycle(self._exercise())
            after_each()
            rounds += 1
        return rounds

    def _let_threads_run(self) -> None:
        assert self.exercise is not None
        self.exercise.waited = wait_until_ran(self.exercise.hook_tids, THREADS_RUN_WAIT)

    def _fork_moments(self) -> Iterator[int]:
        """Once the hook's threads have run, reach each of ``forks`` random moments of the window in turn (a
        child's wait may pass the next one: that fork comes at once), yielding the fork's number."""
        seed = os.environ.get(protocol.SEED_ENV, "")
        began = time.monotonic()
        for number, moment in enumerate(fork_moments(int(seed) if seed.isdigit() else None, self.forks,
                                                     self.fork_window)):
            time.sleep(max(0.0, began + moment - time.monotonic()))
            yield number

    def _fork(self) -> int:
        assert self.exercise is not None
        seen = threads_seen(self.exercise.hook_tids)
        threads = native_thread_count()
        after = round(time.monotonic() - self._hook_returned, 4)
        pid = os.fork()
        if pid:  # before the child can say anything: one that hangs inside fork() is known as the fork-child
            child.emit(protocol.FORK_CHILD, child=pid, after=after, threads=threads, hook_threads=seen)
        self._child = pid
        return pid

    def _join_child(self) -> None:
        pid = self._child
        status = _wait_child(pid, self.fork_child_timeout)
        child.emit(protocol.FORK_CHILD_EXIT, child=pid, status=status)
        if status != 0:
            raise AssertionError(f"the forked child {pid} {_describe_status(status)} (its stderr is above)")


def _drop_on_a_cycle(produced: Any) -> None:
    """Make ``produced`` reachable only from a reference cycle, so only a collection can free it."""
    box: list[Any] = [produced]
    box.append(box)


def _wait_child(pid: int, bound: float) -> int:
    """The forked child's exit code. Past ``bound`` the child is left alone and waited for without end: the
    run's deadline (or its early hang detection) ends the run, and the supervisor captures the child first."""
    pidfd = os.pidfd_open(pid)
    try:
        ready = readable([pidfd], bound)
    finally:
        unpatched.close(pidfd)
    if not ready:
        child.note(f"the forked child {pid} did not finish within {bound:g} s, the probe's deadline for it: "
                   "left as it is for lifeguard to capture")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _describe_status(status: int) -> str:
    if status < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"
