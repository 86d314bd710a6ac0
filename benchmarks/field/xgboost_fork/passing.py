"""The same train / fork / train as bug.py with XGBoost's own one-thread setting (nthread=1).

dmlc/xgboost#6898: "It only works if nthread = 1". With one thread no parallel region
starts libgomp's worker pool in the parent, so the forked child has no stale pool to wait on.
"""

import os
import sys

import numpy as np
import xgboost as xgb


def train() -> None:
    """Build a DMatrix and train a few rounds on one thread (no OpenMP worker pool)."""
    rng = np.random.default_rng(0)
    x = rng.random((2000, 10))
    y = (x[:, 0] > 0.5).astype(float)
    data = xgb.DMatrix(x, label=y, nthread=1)
    xgb.train({"nthread": 1, "objective": "binary:logistic"}, data, num_boost_round=5)


train()
pid = os.fork()
if pid == 0:
    train()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
