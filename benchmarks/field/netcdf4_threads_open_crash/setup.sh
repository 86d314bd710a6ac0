#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# netCDF4 1.6.1 (netcdf-c 4.9.0, HDF5 1.12.2 bundled in its wheel), the release that began
# releasing the GIL around the netCDF C library's calls (Unidata/netcdf4-python#1181, #1192);
# numpy 1.26.4, as 1.6.1 was built against numpy 1.x.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv netcdf4_threads_open_crash netCDF4==1.6.1 cftime==1.6.5 numpy==1.26.4
