"""h5py: an HDF5 file in memory, a chunked compressed dataset written and read, an attribute, a visit callback."""

import os
from typing import Any

MODULES = ("h5py",)
_made = [0]  # one in-memory file name per call: HDF5 refuses to create a file of a name still open


def hook(module: Any) -> list[Any]:
    import numpy

    _made[0] += 1
    handle = module.File(f"lifeguard-{os.getpid()}-{_made[0]}.h5", "w", driver="core", backing_store=False)
    data = handle.create_dataset("a", data=numpy.arange(10000.0), chunks=(1000,), compression="gzip")
    data.attrs["unit"] = "m"
    names: list[str] = []
    handle.visit(names.append)  # a Python callback called from HDF5's iteration
    return [handle, data, data[:100], names]
