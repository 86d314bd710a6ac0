"""polars sorts on its rayon pool in the parent, then again in a forked child: the child hangs.

Upstream: pola-rs/polars#3144 ("Python sub-process gets stucked when parent uses reading
funcs"; polars' multiprocessing guide: "Using fork as the method, instead of spawn, will
cause a dead lock"). polars runs parallel work on a rayon (Rust) thread pool that starts
with the first parallel operation. A forked child inherits the pool's registry (job queue,
sleep state) but none of its worker threads. The child's next parallel sort injects a job
into that registry from outside the pool and blocks on a LockLatch that only a worker
would set: the child's main thread waits in rayon_core's LockLatch::wait_and_reset forever.
(polars warns at fork that the child may deadlock; the warning does not prevent it.)
"""

import os
import random
import sys
import warnings

os.environ.setdefault("POLARS_MAX_THREADS", "2")
import polars as pl  # noqa: E402

warnings.simplefilter("ignore", RuntimeWarning)  # "Using fork() can cause Polars to deadlock"
random.seed(0)
VALUES = [random.random() for _ in range(1_000_000)]


def query() -> float:
    """Sort a million floats: polars hands the sort to its rayon pool (POOL.install)."""
    return pl.Series("v", VALUES).sort()[0]


query()  # the parent's rayon pool now exists, its 2 workers parked
pid = os.fork()
if pid == 0:
    query()  # hangs: the job waits for a pool whose workers did not survive fork
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
