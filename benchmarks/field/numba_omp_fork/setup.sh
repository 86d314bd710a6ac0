#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# No tbb in the venv: numba picks its "omp" threading layer (omppool, linked to the system libgomp).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv numba_omp_fork numba==0.62.1 llvmlite==0.45.1 numpy==2.3.5
