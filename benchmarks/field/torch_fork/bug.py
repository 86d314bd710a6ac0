"""torch runs an intra-op parallel kernel in the parent, then again in a forked child: it hangs.

Upstream: pytorch/pytorch#17199 ("Deadlock with multiprocessing (using fork) and OpenMP").
torch's CPU wheel runs at::parallel_for on OpenMP (GNU libgomp, bundled as
torch/lib/libgomp.so.1). The parent's first parallel kernel starts libgomp's worker pool,
which stays parked. A forked child inherits the pool's bookkeeping but not its threads, so
the child's next parallel kernel waits at the end of its parallel region for workers that
do not exist: the child's main thread waits in gomp_team_barrier_wait_end forever.
"""

import os
import sys

import torch

torch.set_num_threads(2)
X = torch.rand(4_000_000)


def work() -> float:
    """An elementwise kernel big enough for at::parallel_for to split it over 2 threads."""
    return float((X * 2.0 + 1.0).sum())


work()  # the parent's libgomp now has a parked worker thread
pid = os.fork()
if pid == 0:
    work()  # hangs: the parallel region waits for a worker that did not survive fork
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
