"""Probe bodies, run inside a supervised child: exit, fork and gc-thread for any importable module.

Each probe imports the module (phase ``import``), drives it through the user's
hook (phase ``run``) and returns, so the process exits through normal
finalization (phase ``exit``). The hook is ``hook(module)``; what it returns
is the probe's to keep alive or to drop. An optional check runs last, on the
main thread, to look at state only the module can see (it raises, or calls
``lifeguard.child.report_corruption``).
"""

from __future__ import annotations

import gc
import importlib
import os
import threading
import time
from typing import Any

from lifeguard import child
from lifeguard.child.pytest_body import extend_sys_path, load_callable

# How long the collector thread may take to notice it should stop.
COLLECTOR_JOIN_SECONDS = 5.0

# What the exit probe keeps alive: objects the hook returned are destroyed by
# the interpreter's finalization, as a real program's would be (the onnxruntime
# incident's pool was alive until exit()).
_kept_until_exit: list[Any] = []


class Probe:
    """The target module, the hook that exercises it, and the probe bodies."""

    def __init__(self, config: dict[str, Any]) -> None:
        extend_sys_path(list(config.get("paths", ())))
        self.name = config["module"]
        self.module = importlib.import_module(self.name)
        self.hook = load_callable(config["hook"]) if config.get("hook") else None
        self.check = load_callable(config["check"]) if config.get("check") else None
        self.timeout = float(config["timeout"])
        self.gc_rounds = int(config["gc_rounds"])
        self.gc_seconds = float(config["gc_seconds"])

    def _exercise(self) -> Any:
        return self.hook(self.module) if self.hook is not None else None

    def _check(self) -> None:
        if self.check is not None:
            self.check(self.module)

    def exit(self) -> None:
        """Use the module, keep what it made, and let the interpreter finalize it all."""
        _kept_until_exit.append(self._exercise())
        self._check()

    def fork(self) -> None:
        """The module's threads run; fork; the child uses the module and exits normally."""
        _kept_until_exit.append(self._exercise())
        threads = _native_thread_count()
        child.note(f"fork probe: {threads} native thread(s) alive at fork")
        pid = os.fork()  # a deadlocked fork is caught by the run's deadline, with every stack
        if pid == 0:
            # The forked child: use the module again, then return, so this
            # process too exits through normal finalization.
            _kept_until_exit.append(self._exercise())
            self._check()
            return
        _kept_until_exit.append(self._exercise())  # the parent's module still works
        status = _wait_child(pid, self.timeout)
        if status != 0:
            raise AssertionError(f"the forked child {pid} {_describe_status(status)} (its stderr is above)")
        self._check()

    def gc_thread(self) -> None:
        """Objects of the module die on a foreign thread while the owner keeps using the module."""
        stop = threading.Event()
        freed = [0]

        def collect_until_stopped() -> None:
            while not stop.is_set():
                freed[0] += gc.collect()

        # The collector thread is the only one that collects: every cycle the
        # owner drops dies there (TVM Disco: DRefs freed by a server thread's gc).
        gc.disable()
        collector = threading.Thread(target=collect_until_stopped, name="lifeguard-gc", daemon=True)
        collector.start()
        rounds = 0
        deadline = time.monotonic() + self.gc_seconds
        try:
            while rounds < self.gc_rounds and time.monotonic() < deadline:
                _drop_on_a_cycle(self._exercise())
                rounds += 1
        finally:
            stop.set()
            collector.join(COLLECTOR_JOIN_SECONDS)
            gc.enable()
        if collector.is_alive():
            raise TimeoutError(f"the collector thread did not stop within {COLLECTOR_JOIN_SECONDS} s")
        child.note(f"gc-thread probe: {rounds} round(s), {freed[0]} object(s) collected on thread lifeguard-gc")
        self._check()


def _drop_on_a_cycle(produced: Any) -> None:
    """Make ``produced`` reachable only from a reference cycle, so only the collector can free it."""
    box: list[Any] = [produced]
    box.append(box)


def _native_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _wait_child(pid: int, bound: float) -> int:
    """The forked child's exit status; bounded by the run's own deadline, which passes first."""
    import select

    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], bound)
    finally:
        os.close(pidfd)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"the forked child {pid} did not finish within {bound:g} s")
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

