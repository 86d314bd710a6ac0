#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pygame 2.1.3 (SDL 2.0.22), the release of pygame/pygame#3679; the dummy SDL video driver
# is used, so no display is needed.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pygame_display_atexit_order pygame==2.1.3
