"""The same search / fork / search as bug.py, on one OpenMP thread (the fix of faiss#5206).

faiss.omp_set_num_threads(1) before the first search means no parallel region ever starts
libgomp's worker pool in the parent, so the forked child has no stale pool to dock on.
"""

import os
import sys

import faiss
import numpy as np


def search(index: "faiss.IndexFlatL2", queries: np.ndarray) -> None:
    """The same k-NN search as bug.py."""
    index.search(queries, 5)


faiss.omp_set_num_threads(1)
rng = np.random.default_rng(0)
index = faiss.IndexFlatL2(32)
index.add(rng.random((5000, 32), dtype=np.float32))
queries = rng.random((10, 32), dtype=np.float32)
search(index, queries)
pid = os.fork()
if pid == 0:
    search(index, queries)
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
