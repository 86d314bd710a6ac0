#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# tensorstore 0.1.72 is the release whose fork check aborts (google/tensorstore#217, #221;
# 0.1.73 relaxed it).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv tensorstore_fork_abort tensorstore==0.1.72 numpy==2.4.6 ml_dtypes==0.7.0
