#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv polars_fork polars==1.44.2 polars-runtime-32==1.44.2
