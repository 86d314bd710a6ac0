#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# Only QtCore is used, so no display is needed (QT_QPA_PLATFORM=offscreen is set anyway).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pyside6_qthread_exit PySide6-Essentials==6.6.1 shiboken6==6.6.1
