"""netCDF4 1.6.1 releases the GIL around netCDF-C/HDF5 calls: concurrent opens crash.

Upstream: Unidata/netcdf4-python#1192 ("Very frequent segfaults with the new
netCDF4=1.6.1"; also #844, "Concurrent read segfault"). netCDF4 1.6.1 (#1181) releases the
GIL around the netCDF C library's calls, Dataset.__init__'s nc_open included, but neither
netcdf-c nor the HDF5 bundled in the wheel is thread-safe: their global state (the list of
open files, HDF5's ID tables and free lists) is not locked. Four request threads each open,
read and close their own file; with the GIL released, two of them are inside netcdf-c/HDF5
at once, and the process dies within a second: SIGSEGV or an abort inside the library
(e.g. "nc4_find_nc_grp_h5: Assertion `my_h5 && my_h5->root_grp' failed."), preceded by
"HDF5-DIAG: Error detected in HDF5" lines, during the run. Every round, a barrier releases
the four workers into the library together; the process dies within the first few hundred
rounds (a race inside the C library: no single schedule is forced, but the 3000 rounds have
never all survived here).
"""

from _catalog import make_catalog, serve

paths = make_catalog()
print(f"{len(paths)} files; serving requests on 4 threads at once", flush=True)
answered = serve(paths, rounds=3000)
print(f"answered {answered} requests without crashing (not expected)")
