#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pyFFTW's wheels bundle FFTW 3 built with its pthreads thread pool.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pyfftw_fork pyfftw==0.15.1 numpy==2.4.6
