#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv jax_fork jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 ml_dtypes==0.7.0 scipy==1.17.1 opt_einsum==3.4.0
