#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# The bug is in CPython's own _io module: the venv needs no package.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv cpython_bufferedwriter_fork
