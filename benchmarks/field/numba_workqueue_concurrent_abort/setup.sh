#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# numba 0.60.0 (numpy 2.0.2): its workqueue threading layer has the concurrent-access abort
# of numba/numba#8563 (message reworded by numba/numba#8566, in 0.57 and later).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv numba_workqueue_concurrent_abort numba==0.60.0 numpy==2.0.2
