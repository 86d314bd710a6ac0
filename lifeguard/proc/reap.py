"""Collect the exit status of a child that was killed or told to go, within a bound.

Standard library only: the head start (lifeguard.run.headstart_process) calls it before the rest of lifeguard
is imported.
"""

from __future__ import annotations

import os
import time

POLL = 0.005


def reap_within(pid: int, timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for our child ``pid`` to exit, and collect it; False if it had not."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return True
        except ChildProcessError:
            return True  # not ours, or collected already
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
