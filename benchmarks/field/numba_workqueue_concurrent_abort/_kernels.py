"""A numba parallel kernel and a background worker that runs it; shared by bug.py and passing.py.

The threading layer is pinned to numba's own "workqueue" (what numba falls back to when
neither TBB nor a usable OpenMP is there, and what many CI images and Windows/macOS wheels
end up with); the environment variable must be set before numba is imported.
"""

import os

os.environ["NUMBA_THREADING_LAYER"] = "workqueue"

import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from numba import njit, prange, threading_layer  # noqa: E402


@njit(parallel=True, nogil=True)
def row_energy(x, sweeps):
    """One parallel region (a single prange) that runs for a while; the GIL is released."""
    out = np.empty(x.shape[0])
    for i in prange(x.shape[0]):
        acc = 0.0
        for _ in range(sweeps):
            for j in range(x.shape[1]):
                acc += x[i, j] * x[i, j] * 1e-9
        out[i] = acc
    return out


DATA = np.random.default_rng(0).random((64, 4096))
LONG_SWEEPS = 40000  # the worker's region: about 5 s on 2 cores (the abort comes long before)


def warm_up() -> str:
    """Compile on the main thread (a short call) and report the layer numba picked."""
    row_energy(DATA[:4], 1)
    return threading_layer()


def _worker(started: threading.Event, lock) -> None:
    started.set()
    with lock:
        row_energy(DATA, LONG_SWEEPS)  # <- the line the main thread waits to see this thread on


def start_worker(lock) -> threading.Thread:
    """Start a thread running the long kernel; return once it is inside the parallel region.

    Handshake: the main thread can look only while the worker has released the GIL, which
    on that line means inside the nogil kernel; a short settle covers the few instructions
    between reaching the line and launching the region, which then runs for seconds.
    """
    started = threading.Event()
    thread = threading.Thread(target=_worker, args=(started, lock), name="energy", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("handshake broke: the worker did not start")
    code = _worker.__code__
    lines = open(code.co_filename, encoding="utf-8").read().splitlines()
    target = next(n for n in range(code.co_firstlineno, len(lines) + 1)
                  if lines[n - 1].strip().startswith("row_energy(DATA, LONG_SWEEPS)"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        if frame is not None and frame.f_code is code and frame.f_lineno == target:
            time.sleep(0.3)
            return thread
        time.sleep(0.01)
    raise RuntimeError("handshake broke: the worker never entered the kernel")
