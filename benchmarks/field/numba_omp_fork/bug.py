"""A numba parallel=True kernel runs in the parent, then again in a forked child: numba kills the child.

Upstream: camUrban/PteraSoftware#229 ("Forking after a solve aborts at the C level"; its fix,
PR #287, traces it to numba's omppool.cpp) and scverse/fast-array-utils#179, both numba users;
numba's own design note is numba/numba#3202. Without tbb installed numba's threading layer is
"omp": numba/np/ufunc/omppool (GNU libgomp). Its first parallel_for starts libgomp's worker
pool in the parent. GNU OpenMP does not survive fork (the child inherits the pool's
bookkeeping, not its threads), so omppool's parallel_for checks whether it runs in a child of
the process that launched the pool and, if so, prints "Terminating: fork() called from a
process already using GNU OpenMP, this is unsafe." and raises SIGTERM in the child. The
parent only waits for the child and exits with its status.
"""

import os
import sys

import numba
import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=False)
def total(x: np.ndarray) -> float:
    """Sum x in a prange loop: one omppool parallel_for on the OpenMP pool."""
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
    return s


x = np.ones(1_000_000)
assert total(x) == 1_000_000.0  # the parent's libgomp now has a pool of worker threads
assert numba.threading_layer() == "omp", numba.threading_layer()
pid = os.fork()
if pid == 0:
    total(x)  # omppool's parallel_for sees the fork: prints "Terminating: ..." and raises SIGTERM
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
