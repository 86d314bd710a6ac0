"""The same parallel sum / fork / parallel sum as bug.py, on numba's fork-safe "workqueue" layer.

numba's threading-layer docs: the workqueue layer is fork safe (numba/numba#8195 restarts its
pool in a forked child), while GNU OpenMP is not. Choosing it before the first parallel call
(numba.config.THREADING_LAYER, like NUMBA_THREADING_LAYER=workqueue) means the parent never
starts libgomp's pool, and the child's kernel starts its own workqueue threads and finishes.
"""

import os
import sys

import numba
import numpy as np
from numba import njit, prange

numba.config.THREADING_LAYER = "workqueue"  # the fix: a fork-safe layer, chosen before any parallel call


@njit(parallel=True, cache=False)
def total(x: np.ndarray) -> float:
    """Sum x in a prange loop (the same kernel as bug.py)."""
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
    return s


x = np.ones(1_000_000)
assert total(x) == 1_000_000.0
assert numba.threading_layer() == "workqueue", numba.threading_layer()
pid = os.fork()
if pid == 0:
    os._exit(0 if total(x) == 1_000_000.0 else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
