"""The same sort / child sort as bug.py, with the child started the way polars says: spawn.

polars' multiprocessing guide (and pola-rs/polars#3144): use the "spawn" start method. A
spawned child is a fresh interpreter that starts its own rayon pool, so its sort runs.
"""

import multiprocessing
import os
import random
import sys

os.environ.setdefault("POLARS_MAX_THREADS", "2")
import polars as pl  # noqa: E402

random.seed(0)
VALUES = [random.random() for _ in range(1_000_000)]


def query() -> float:
    """The same parallel sort as bug.py."""
    return pl.Series("v", VALUES).sort()[0]


if __name__ == "__main__":
    query()
    child = multiprocessing.get_context("spawn").Process(target=query)
    child.start()
    child.join(60)
    sys.exit(child.exitcode if child.exitcode is not None else 1)
