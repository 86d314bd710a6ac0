#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pyarrow 14.0.1 (has apache/arrow#38626) in the venv, and the fixed release 15.0.0 in a
# separate folder inside it (fixed-pyarrow-15.0.0/) that passing.py puts first on sys.path,
# so both variants run in one venv (numpy 1.26.4 suits both).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
python=$(make_venv pyarrow_atexit_import pyarrow==14.0.1 numpy==1.26.4 | tail -n 1)
fixed=$(dirname "$(dirname "$python")")/fixed-pyarrow-15.0.0
if [ ! -f "$fixed/.complete" ]; then
    rm -rf "$fixed"
    "$python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
        --target "$fixed" pyarrow==15.0.0 >&2
    touch "$fixed/.complete"
fi
echo "$python"
