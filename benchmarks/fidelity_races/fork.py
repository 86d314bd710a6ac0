"""A lock held part of the time at fork (fork-with-held-gil's lock half).

A native thread holds a plain mutex HOLD of every PERIOD microseconds; the program forks once, at a random
moment, and the child takes the mutex. A child forked while the mutex was held waits forever: the parent
gives it WAIT seconds, kills it and exits 1. Otherwise exits 0.

    python fork.py BUILD_DIR [HOLD_US PERIOD_US]
"""

import os
import random
import select
import signal
import sys
import time

sys.path.insert(0, sys.argv[1])
import races  # noqa: E402

WAIT = 2.0
hold_us, period_us = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (50, 1000)
races.start_locker(hold_us, period_us)
deadline = time.perf_counter() + random.uniform(0.002, 0.01)
while time.perf_counter() < deadline:  # busy, not asleep: a sleep's wake-up lines up with the locker's
    pass
pid = os.fork()
if pid == 0:
    races.use_lock()
    os._exit(0)
pidfd = os.pidfd_open(pid)
ready, _, _ = select.select([pidfd], [], [], WAIT)
if not ready:
    os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
sys.exit(0 if ready else 1)
