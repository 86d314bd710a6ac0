#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv faiss_fork faiss-cpu==1.15.1 numpy==2.4.6
