"""Handshake helper: wait until a thread has spent CPU time inside one long hash update.

A hash object's update() with 2 KiB or more releases the GIL and takes the object's own
lock for the whole computation (Modules/_hashopenssl.c, EVP_update). The thread does
nothing CPU-heavy after its "started" event but that update, so once its CPU time
(utime + stime in /proc/self/task/TID/stat) has grown by 50 ms it is inside the locked
section, and the buffer is big enough that it stays there for seconds: no sleep, no race.
"""

import os
import time

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(tid: int) -> float:
    """CPU time (user + system) thread tid of this process has used so far."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def wait_cpu(tid: int, since: float, seconds: float = 0.05, timeout: float = 10.0) -> None:
    """Wait until thread tid has used `seconds` of CPU beyond `since` (RuntimeError after timeout)."""
    deadline = time.monotonic() + timeout
    while cpu_seconds(tid) - since < seconds:
        if time.monotonic() > deadline:
            raise RuntimeError(f"thread {tid} is not hashing")
        time.sleep(0.005)
