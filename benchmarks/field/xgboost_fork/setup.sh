#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# xgboost-cpu is XGBoost's CPU-only wheel (the same library without the CUDA runtime).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv xgboost_fork xgboost-cpu==3.2.0 numpy==2.4.6 scipy==1.17.1
