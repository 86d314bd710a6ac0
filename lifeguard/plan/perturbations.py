"""Perturbations: changes to a run's conditions that make rare lifetime bugs show sooner.

Each is recorded in the run's result. Some act from the supervisor's side (interpreter
flags, environment), the rest inside the child (lifeguard.child.perturb), all
seeded from the run's seed so ``--seed`` replays them.
"""

from __future__ import annotations

from lifeguard.child.protocol import JITTER_ENV, SEED_ENV
from lifeguard.errors import UsageError

EXIT_STARVE = "exit-starve"  # the run layer tells a clean bound whether a run had it
PERTURBATIONS: dict[str, str] = {
    "switch-interval": "sys.setswitchinterval(1e-6): threads switch as often as the interpreter allows",
    "gc-aggressive": "gc.set_threshold(1, 1, 1): a collection at almost every allocation",
    "gc-thread": "a helper thread calls gc.collect() in a loop, so objects die on a foreign thread",
    "pin-cpu": "pin the child to one CPU (chosen by the seed): threads interleave at preemption points only",
    "malloc-debug": "PYTHONMALLOC=debug: freed memory is poisoned, so use-after-free shows",
    "dev-mode": "-X dev: debug hooks, warnings and extra checks",
    "jitter": "random short sleeps at fixture hook points (LIFEGUARD_JITTER_US, child.hook_point())",
    EXIT_STARVE: "from the body's end (or the last atexit callback) on, the process's other threads share the "
                   "exiting thread's CPU at idle priority: they run only when it waits, so a thread that would "
                   "enter Python after finalization does",
}
JITTER_MICROSECONDS = 200
# Perturbations that act when the interpreter starts: a forked run cannot have them.
START_PERTURBATIONS = ("malloc-debug", "dev-mode")


def check_perturbations(names: tuple[str, ...] | list[str]) -> None:
    for name in names:
        if name not in PERTURBATIONS:
            raise UsageError(f"unknown perturbation {name!r} (choose from {', '.join(PERTURBATIONS)})")


def parse_perturbations(text: str) -> tuple[str, ...]:
    """``"gc-thread,jitter"`` (or ``all``) -> names, checked."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if names == ("all",):
        return tuple(PERTURBATIONS)
    check_perturbations(names)
    return names


def supervisor_side(names: tuple[str, ...], seed: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """Interpreter flags and environment for a run: the parts the child cannot do itself."""
    flags: list[str] = []
    # Every run's hash seed comes from its seed: a replay iterates sets and dicts alike.
    env = {"PYTHONHASHSEED": str(seed % (2**32 - 1)), SEED_ENV: str(seed)}
    if "dev-mode" in names:
        flags += ["-X", "dev"]
    if "malloc-debug" in names:
        env["PYTHONMALLOC"] = "debug"
    if "jitter" in names:
        env[JITTER_ENV] = str(JITTER_MICROSECONDS)
    return tuple(flags), env
