"""faiss searches with OpenMP in the parent, then again in a forked child: the child hangs.

Upstream: facebookresearch/faiss#5206 ("FAISS search can hang after fork with multithreaded
OpenMP runtime"). faiss-cpu's wheel bundles GNU libgomp (faiss_cpu.libs/libgomp-*.so). The
parent's first parallel search starts libgomp's worker pool, which stays parked between
regions. A forked child inherits the pool's bookkeeping but not its threads, so the child's
first parallel search docks on a barrier that no worker will ever reach.
"""

import os
import sys

import faiss
import numpy as np


def search(index: "faiss.IndexFlatL2", queries: np.ndarray) -> None:
    """One k-NN search: for fewer than 20 queries faiss scans them in an OpenMP parallel loop."""
    index.search(queries, 5)


faiss.omp_set_num_threads(2)
rng = np.random.default_rng(0)
index = faiss.IndexFlatL2(32)
index.add(rng.random((5000, 32), dtype=np.float32))
queries = rng.random((10, 32), dtype=np.float32)
search(index, queries)  # the parent's libgomp now has a parked worker thread
pid = os.fork()
if pid == 0:
    search(index, queries)  # hangs: docks on the inherited pool's barrier
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
