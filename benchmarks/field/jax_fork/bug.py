"""JAX computes on the CPU in the parent, the process forks, the child computes: the child hangs.

Upstream: jax-ml/jax#18852 ("JAX hangs when allocating array of at least 2^19 bytes on CPU
in subprocess"), whose fix, jax-ml/jax#18989, is the warning JAX now prints at fork: "os.fork()
was called. os.fork() is incompatible with multithreaded code, and JAX is multithreaded, so
this will likely lead to a deadlock." The first computation starts XLA's CPU client (PjRt),
which runs dispatched work and large transfers asynchronously on its own thread pools. A
forked child inherits the client, its queues and its async values, but none of its threads:
the child's matmul is dispatched to a pool that no longer exists, and reading its result
(float() -> np.asarray) waits in tsl::BlockUntilReady (an absl Notification) for a worker
that will never run it. The warning is printed in the parent at fork; the parent only waits.
"""

import os
import sys

import jax
import jax.numpy as jnp


def work() -> float:
    """A 1000x1000 matmul on the CPU backend and its sum, read back to Python."""
    x = jnp.ones((1000, 1000))
    return float((x @ x).sum())


assert work() == 1e9  # the parent's XLA CPU client and its thread pools now exist
assert jax.default_backend() == "cpu", jax.default_backend()
pid = os.fork()  # JAX warns: "os.fork() was called. ... this will likely lead to a deadlock."
if pid == 0:
    work()  # hangs: the result waits for the parent's pool threads, which the child does not have
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
