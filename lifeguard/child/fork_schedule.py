"""When the fork probes fork: once every thread the hook started has run (from /proc), FORKS times, one child at a
time, at moments the run's seed picks over FORK_WINDOW seconds, so a thread that holds a lock most of the time is
caught holding it.

The one home of that schedule: child/probe.py forks by it, and a survey's reproduction script (survey/repro.py)
copies REPRODUCED_CONSTANTS and REPRODUCED_FUNCTIONS (their text, verbatim) so that it forks as the probe did.
Hence each function here uses only the modules REPRODUCED_IMPORTS and the names those two hold.
"""

from __future__ import annotations

import os
import random
import time

# Forks per run, and the window their random moments fall in (seconds after the hook's threads have run).
FORKS = 4
FORK_WINDOW = 0.5
# How long to wait at most for the hook's threads to have run before forking anyway.
THREADS_RUN_WAIT = 2.0
THREAD_POLL = 0.001
# A thread "has run" once it went off the CPU at least once (it blocked or was preempted: a lock-holding loop
# reached its first wait) or used this much CPU time.
RAN_CPU_NS = 1_000_000


def task_ids() -> list[int]:
    """The ids of this process's native threads."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def read_text(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def thread_state(tid: int) -> tuple[str, str, int, int]:
    """A thread's name, state letter, CPU time (ns) and context switches, from /proc ("" and 0 once gone)."""
    stat = read_text(f"/proc/self/task/{tid}/stat")
    name, _, rest = stat.partition(" (")[2].rpartition(") ")
    state = rest.split(" ", 1)[0] if rest else ""
    schedstat = read_text(f"/proc/self/task/{tid}/schedstat").split()
    cpu = int(schedstat[0]) if schedstat and schedstat[0].isdigit() else 0
    switches = sum(int(line.split()[-1]) for line in read_text(f"/proc/self/task/{tid}/status").splitlines()
                   if line.endswith(tuple("0123456789")) and "ctxt_switches" in line)
    return name, state, cpu, switches


def threads_seen(tids: list[int]) -> list[list[object]]:
    """[name, state letter, CPU ns] of each of ``tids`` still alive."""
    seen: list[list[object]] = []
    for tid in tids:
        name, state, cpu, _ = thread_state(tid)
        if state:
            seen.append([name, state, cpu])
    return seen


def wait_until_ran(tids: list[int], bound: float) -> float:
    """Seconds waited, at most ``bound``, until each of ``tids`` has run (left the CPU once, or used RAN_CPU_NS)
    or ended: a thread the hook just created may not have taken its lock yet."""
    began = time.monotonic()
    waiting = list(tids)
    while waiting and time.monotonic() - began < bound:
        states = {tid: thread_state(tid) for tid in waiting}
        waiting = [tid for tid, (_, state, cpu, switches) in states.items()
                   if state and state not in "ZX" and switches == 0 and cpu < RAN_CPU_NS]
        if waiting:
            time.sleep(THREAD_POLL)
    return time.monotonic() - began


def fork_moments(seed: int | None, forks: int, window: float) -> list[float]:
    """The moments to fork at, in seconds after the hook's threads have run, in order (None: unseeded)."""
    rng = random.Random(seed)
    return sorted(rng.uniform(0, window) for _ in range(forks))


REPRODUCED_IMPORTS = ("os", "random", "time")
REPRODUCED_CONSTANTS = {"FORKS": FORKS, "FORK_WINDOW": FORK_WINDOW, "THREADS_RUN_WAIT": THREADS_RUN_WAIT,
                        "THREAD_POLL": THREAD_POLL, "RAN_CPU_NS": RAN_CPU_NS}
REPRODUCED_FUNCTIONS = (task_ids, read_text, thread_state, threads_seen, wait_until_ran, fork_moments)
