"""The same service as bug.py, with every netCDF call serialised by one process-wide lock.

What the netCDF4 maintainers advise (netcdf-c is not thread-safe, and relying on the GIL to
serialise it only hid the problem, as said in Unidata/netcdf4-python#1193 and
pydata/xarray#9779) and what xarray does with its HDF5/netCDF lock: a request thread holds
the lock from open to close, so no two threads are inside netcdf-c/HDF5 at once, and the
requests complete (HDF5 still prints its "HDF5-DIAG" notes for the optional
attributes netcdf-c probes on the worker threads: harmless, and printed without the bug too).
"""

import threading

from _catalog import make_catalog, serve

NETCDF_LOCK = threading.Lock()

paths = make_catalog()
answered = serve(paths, rounds=50, lock=NETCDF_LOCK)
print(f"answered {answered} requests on 4 threads; exiting cleanly")
assert answered == 4 * 50, answered
