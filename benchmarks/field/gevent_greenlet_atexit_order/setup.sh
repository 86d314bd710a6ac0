#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# greenlet 3.4.0 (its atexit callback, python-greenlet/greenlet#499) with gevent 26.4.0, the
# pair of python-greenlet/greenlet#507; the fixed greenlet 3.5.0 goes to fixed-greenlet-3.5.0/
# inside the venv, which passing.py puts first on sys.path.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
python=$(make_venv gevent_greenlet_atexit_order gevent==26.4.0 greenlet==3.4.0 zope.event==6.2 zope.interface==8.7 | tail -n 1)
fixed=$(dirname "$(dirname "$python")")/fixed-greenlet-3.5.0
if [ ! -f "$fixed/.complete" ]; then
    rm -rf "$fixed"
    "$python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
        --target "$fixed" greenlet==3.5.0 >&2
    touch "$fixed/.complete"
fi
echo "$python"
