"""The same train / fork / train as bug.py, done the way LightGBM's FAQ 11 says: one thread.

With num_threads=1 no parallel region starts libgomp's worker pool in the parent, so the
forked child has no stale pool to dock on and trains normally (lightgbm-org/LightGBM#1789).
"""

import os
import sys

import lightgbm as lgb
import numpy as np


def train() -> None:
    """Train the same small booster as bug.py, on one thread (FAQ 11's fix)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 10))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    params = {"objective": "binary", "num_threads": 1, "verbose": -1}
    lgb.train(params, lgb.Dataset(x, label=y), num_boost_round=5)


train()
pid = os.fork()
if pid == 0:
    train()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
