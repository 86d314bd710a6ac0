#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# h5py 3.16.0 (its global lock `phil` still guards ObjectID.__dealloc__ and is held while
# HDF5 calls a Python file-like object's methods), with numpy.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv h5py_gc_filelike_deadlock h5py==3.16.0 numpy==2.4.6
