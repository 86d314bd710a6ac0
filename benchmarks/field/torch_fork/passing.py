"""The same kernel / fork / kernel as bug.py with torch's own one-thread setting before fork.

torch.set_num_threads(1) makes at::parallel_for run inline, so no OpenMP parallel region
starts libgomp's worker pool in the parent and the forked child has no stale pool to wait
on (the workaround discussed in pytorch/pytorch#17199; spawn/forkserver also work).
"""

import os
import sys

import torch

torch.set_num_threads(1)
X = torch.rand(4_000_000)


def work() -> float:
    """The same elementwise kernel as bug.py."""
    return float((X * 2.0 + 1.0).sum())


work()
pid = os.fork()
if pid == 0:
    work()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
