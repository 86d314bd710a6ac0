"""The child-side perturbations (lifeguard.plan.perturbations names them all), seeded for replay. Imported only
by a run that has some."""

from __future__ import annotations

import _thread
import os
import random
import sys

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Callable

STARVE_PAUSE = 0.005  # exit-starve's one pause, in seconds
GC_THREAD_STOP = 2.0  # seconds the exit waits for gc-thread's collection under way to end


def apply(names: list[str], seed: int) -> list[Callable[[], None]]:
    """Apply the perturbations that act from the start; returns what the others do when the exit begins (at the
    body's end, and again at the last atexit callback)."""
    rng = random.Random(seed)
    at_exit: list[Callable[[], None]] = []
    if "switch-interval" in names:
        sys.setswitchinterval(1e-6)
    if "gc-aggressive" in names:
        import gc

        gc.set_threshold(1, 1, 1)
    if "pin-cpu" in names and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rng.randrange(len(cpus))]})
    if "exit-starve" in names and hasattr(os, "SCHED_IDLE"):
        cpus = sorted(os.sched_getaffinity(0))
        at_exit.append(exit_starve(cpus[rng.randrange(len(cpus))]))
    if "gc-thread" in names:
        import gc
        import threading
        import time

        pause = rng.uniform(0.0, 0.0005)
        stop = threading.Event()

        def collect_until_exit() -> None:
            while not stop.is_set():
                gc.collect()
                time.sleep(pause)

        # A daemon, stopped when the exit begins: a collection of its own still under way when the interpreter
        # finalizes parks its thread for good (CPython 3.13+), and a free-threaded build's last collection then
        # waits for it forever: a hang at exit of lifeguard's making, not the program's.
        collector = threading.Thread(target=collect_until_exit, name="lifeguard-gc", daemon=True)
        collector.start()

        def stop_collecting() -> None:
            stop.set()
            if collector is not threading.current_thread():
                collector.join(GC_THREAD_STOP)

        at_exit.append(stop_collecting)
    return at_exit


def exit_starve(cpu: int) -> Callable[[], None]:
    """exit-starve: every thread of the process on one CPU, all but the exiting one at idle priority. A native
    thread then runs only when the exit waits, not beside finalization on another CPU: it wakes after it, as it
    does when it happens to share the main thread's CPU (static destructors' exit races)."""
    paused: list[bool] = []

    def starve() -> None:
        me = _thread.get_native_id()
        try:
            tids = [int(name) for name in os.listdir("/proc/self/task")]
        except OSError:
            return
        for tid in sorted(tids, key=lambda t: t != me):  # this thread first: it must not move away afterwards
            try:
                os.sched_setaffinity(tid, {cpu})
                if tid != me:
                    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError:  # gone meanwhile
                pass
        if not paused:
            # Once, a pause: a thread that waits for the GIL gets it and goes back to its own wait (a sleep, a
            # queue), instead of leaving on the GIL's exit path at finalization, which hides the race.
            paused.append(True)
            import time

            time.sleep(STARVE_PAUSE)

    return starve
