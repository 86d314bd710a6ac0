#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv lightgbm_fork lightgbm==4.7.0 numpy==2.4.6 scipy==1.17.1
