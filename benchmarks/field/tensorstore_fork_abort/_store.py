"""A small zarr array in tensorstore's in-memory kvstore, shared by bug.py and passing.py."""

import numpy as np
import tensorstore as ts


def write_and_read() -> float:
    """Create a 256x256 float64 zarr array, write ones, read it back: tensorstore's thread pools run."""
    store = ts.open({"driver": "zarr", "kvstore": {"driver": "memory"}},
                    create=True, dtype=ts.float64, shape=[256, 256]).result()
    store.write(np.ones((256, 256))).result()
    return float(store.read().result().sum())


def child_work() -> None:
    """What the worker process does: an array of its own."""
    assert write_and_read() == 65536.0
