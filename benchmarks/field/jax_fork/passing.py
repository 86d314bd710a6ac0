"""The same computation / child computation as bug.py, with the child started by spawn.

What JAX's fork warning (jax-ml/jax#18989, the fix of #18852) and its maintainers advise: do
not fork a process whose JAX runtime is running; use the 'spawn' (or 'forkserver') start
method. A spawned child is a fresh interpreter that starts an XLA CPU client of its own.
"""

import multiprocessing
import sys

import jax.numpy as jnp


def work() -> float:
    """The same matmul as bug.py."""
    x = jnp.ones((1000, 1000))
    return float((x @ x).sum())


def child() -> None:
    """The child's computation; a wrong result exits non-zero."""
    sys.exit(0 if work() == 1e9 else 1)


if __name__ == "__main__":
    assert work() == 1e9
    proc = multiprocessing.get_context("spawn").Process(target=child)
    proc.start()
    proc.join(60)
    sys.exit(proc.exitcode if proc.exitcode is not None else 1)
