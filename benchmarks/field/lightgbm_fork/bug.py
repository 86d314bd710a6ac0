"""LightGBM trains with OpenMP in the parent, then again in a forked child: the child hangs.

Upstream: lightgbm-org/LightGBM#1789 (FAQ 11, "LightGBM hangs when multithreading (OpenMP)
and using forking in Linux at the same time"). lib_lightgbm.so uses GNU libgomp. Its first
parallel region starts a pool of worker threads that stays parked for the next region. A
forked child inherits the pool's bookkeeping (pool size, barrier counts) but not the
threads, so the child's next parallel region docks on a barrier the missing workers never
reach: the child's main thread waits in gomp_team_barrier_wait forever.
"""

import os
import sys

import lightgbm as lgb
import numpy as np


def train() -> None:
    """Train a small booster on 2 OpenMP threads (every boosting round runs parallel regions)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 10))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    params = {"objective": "binary", "num_threads": 2, "verbose": -1}
    lgb.train(params, lgb.Dataset(x, label=y), num_boost_round=5)


train()  # the parent's libgomp now has a pool of parked worker threads
pid = os.fork()
if pid == 0:
    train()  # hangs: docks on the inherited pool's barrier; its workers do not exist here
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
