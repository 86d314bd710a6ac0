"""XGBoost trains on 2 OpenMP threads in the parent, then again in a forked child: the child hangs.

Upstream: dmlc/xgboost#6898 ("DMatrix with multiprocessing deadlock": "It only works if
nthread = 1"; maintainers: "a bug somewhere inside openmp runtime", also #7044). The
xgboost-cpu wheel bundles GNU libgomp (xgboost_cpu.libs/libgomp-*.so). The parent's first
parallel region starts libgomp's worker pool, which stays parked. A forked child inherits
the pool's bookkeeping but not its threads, so the child's first parallel region (building
its DMatrix) waits on a barrier no worker will reach: gomp_team_barrier_wait_end forever.
"""

import os
import sys

import numpy as np
import xgboost as xgb


def train() -> None:
    """Build a DMatrix and train a few rounds on 2 threads (both run OpenMP parallel regions)."""
    rng = np.random.default_rng(0)
    x = rng.random((2000, 10))
    y = (x[:, 0] > 0.5).astype(float)
    data = xgb.DMatrix(x, label=y, nthread=2)
    xgb.train({"nthread": 2, "objective": "binary:logistic"}, data, num_boost_round=5)


train()  # the parent's libgomp now has a parked worker thread
pid = os.fork()
if pid == 0:
    train()  # hangs: its parallel regions wait for a worker that did not survive fork
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
