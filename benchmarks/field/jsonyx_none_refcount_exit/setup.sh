#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# jsonyx 2.2.0 (the buggy release; an sdist, so its _jsonyx C extension is compiled here:
# needs a C compiler and the interpreter's headers) in the venv, and the fixed release
# 2.2.1 in a separate folder inside it (fixed-jsonyx-2.2.1/) that passing.py puts first on
# sys.path, so both variants run in one venv.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
python=$(make_venv jsonyx_none_refcount_exit jsonyx==2.2.0 | tail -n 1)
fixed=$(dirname "$(dirname "$python")")/fixed-jsonyx-2.2.1
if [ ! -f "$fixed/.complete" ]; then
    rm -rf "$fixed"
    "$python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
        --target "$fixed" jsonyx==2.2.1 >&2
    touch "$fixed/.complete"
fi
echo "$python"
