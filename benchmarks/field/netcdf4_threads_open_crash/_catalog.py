"""A small catalog of netCDF-4 files and a reader that summarises one of them.

Shared by bug.py and passing.py: a web service (or a dask/xarray pipeline) that answers
requests on a thread pool, each request opening one netCDF file, reading a variable and
closing it, as in Unidata/netcdf4-python#844 and #1192.
"""

import os
import tempfile
import threading

import netCDF4
import numpy as np

WORKERS = 4


def make_catalog() -> list[str]:
    folder = tempfile.mkdtemp(prefix="catalog-")
    paths = []
    for i in range(WORKERS):
        path = os.path.join(folder, f"station{i}.nc")
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", 100)
            var = ds.createVariable("temperature", "f8", ("time",))
            var[:] = np.arange(100.0) + i
        paths.append(path)
    return paths


def summarise(path: str, lock=None) -> float:
    """One request: open the file, read the variable, close it (under lock if given)."""
    if lock is None:
        with netCDF4.Dataset(path, "r") as ds:
            return float(ds["temperature"][:].mean())
    with lock:
        with netCDF4.Dataset(path, "r") as ds:
            return float(ds["temperature"][:].mean())


def serve(paths: list[str], rounds: int, lock=None) -> int:
    """WORKERS threads answering requests in rounds: each round, every worker gets a request
    for its own file at the same moment (a burst of clients), and answers it."""
    burst = threading.Barrier(WORKERS)
    answered = [0] * WORKERS

    def worker(index: int) -> None:
        for _ in range(rounds):
            burst.wait()  # handshake: all workers enter the library together, every round
            try:
                summarise(paths[index], lock)
                answered[index] += 1
            except Exception:  # e.g. RuntimeError "NetCDF: HDF error": the request fails,
                pass  # the service goes on (and no worker leaves the others at the barrier)

    threads = [threading.Thread(target=worker, args=(i,), name=f"request-{i}") for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(answered)
