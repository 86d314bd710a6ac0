#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# PySide2 5.15.2.1 (the Qt for Python generation AcademySoftwareFoundation/OpenCue's CueGUI
# ran on) has no wheels for Python 3.11, so this case uses a Python 3.10: $PYTHON310, else
# python3.10 on PATH, else pyenv's newest 3.10. Only QtCore is used: no display is needed.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
py310=${PYTHON310:-}
if [ -z "$py310" ]; then
    if python3.10 -c '' 2>/dev/null; then
        py310=python3.10
    else
        py310=$(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.10.*/bin/python3.10 2>/dev/null | tail -n 1)
    fi
fi
[ -n "$py310" ] || { echo "setup.sh: no Python 3.10 found (set PYTHON310)" >&2; exit 1; }
PYTHON=$py310 make_venv pyside2_timer_gc_thread PySide2==5.15.2.1 shiboken2==5.15.2.1
