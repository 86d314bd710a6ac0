"""The same work as bug.py, the way h5py/h5py#2021 advises: no cycle that holds an h5py object.

The cached series keeps its change callbacks as weak methods (weakref.WeakMethod), so it
holds no reference to itself: dropping it frees its dataset wrapper at once, on the main
thread, by reference counting. The IO thread's collection still runs during the remote
read, but finds no h5py object to free, and the file opens.
"""

import gc
import io
import weakref

import h5py
import numpy as np
from _remote import IOThread, RemoteFile, make_hdf5_bytes


class Series:
    def __init__(self, dataset: h5py.Dataset) -> None:
        self.dataset = dataset
        self.on_change = [weakref.WeakMethod(self.refresh)]  # no cycle

    def refresh(self) -> None:
        pass


local = h5py.File(io.BytesIO(), "w")
local["cache"] = np.zeros(10)
gc.disable()
series = Series(local["cache"])
del series  # freed here, on the main thread

io_thread = IOThread(collect_on_first_request=True)
with h5py.File(RemoteFile(make_hdf5_bytes(), io_thread), "r") as remote:
    print("mean temperature:", remote["temperature"][:].mean())
io_thread.stop()
local.close()
print("remote file read; exiting cleanly")
