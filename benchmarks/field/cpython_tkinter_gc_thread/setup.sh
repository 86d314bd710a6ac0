#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# The bug is in CPython's own _tkinter module (Tcl 8.6): the venv needs no package, but
# the interpreter must have _tkinter (pyenv's 3.11.7 here has it, linked to Tcl 8.6).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv cpython_tkinter_gc_thread
