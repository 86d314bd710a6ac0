"""An h5py object freed by the gc on fsspec's IO thread while h5py's lock waits for it: hang.

Upstream: h5py/h5py#2019 ("Potential deadlock from some combination of h5py, gc, and
fsspec"; also dask/dask#7547, where gdb showed the fsspecIO thread's collection in
ObjectID.__dealloc__ waiting for h5py's lock); h5py/h5py#2021 documented it and the
workaround: no reference cycles that hold h5py objects (weakref), or no collection then.
h5py serialises every HDF5 call with a global lock (`phil`), held while HDF5 calls back into
a Python file-like object, and ObjectID.__dealloc__ takes the same lock. The main thread
opens an HDF5 file from a remote file-like object: it holds phil in H5Fopen and waits for the
IO thread to serve the read. The IO thread's garbage collection frees a dataset wrapper
caught in a reference cycle: its DatasetID.__dealloc__ waits for phil, which the main thread
holds until the read returns. Neither moves: the run hangs.
"""

import gc
import io

import h5py
import numpy as np
from _remote import IOThread, RemoteFile, make_hdf5_bytes


class Series:
    """A cached time series: keeps an h5py dataset and a back-reference (a cycle)."""

    def __init__(self, dataset: h5py.Dataset) -> None:
        self.dataset = dataset
        self.on_change = [self.refresh]  # bound method of self: Series <-> list cycle

    def refresh(self) -> None:
        pass


local = h5py.File(io.BytesIO(), "w")
local["cache"] = np.zeros(10)
gc.disable()  # so the cycle is not freed by a collection on the main thread first
series = Series(local["cache"])
del series  # unreachable; its cycle keeps the DatasetID alive until a gc pass

io_thread = IOThread(collect_on_first_request=True)
print("opening the remote HDF5 file (reads served by the fsspecIO thread)", flush=True)
with h5py.File(RemoteFile(make_hdf5_bytes(), io_thread), "r") as remote:
    # H5Fopen holds phil and reads through RemoteFile.readinto -> waits for fsspecIO, whose
    # gc.collect() frees the Series cycle -> DatasetID.__dealloc__ waits for phil: deadlock
    print("mean temperature:", remote["temperature"][:].mean())
io_thread.stop()
print("not reached")
