#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pycurl 7.45.6 is the last release whose reset() on a closed handle passes NULL to libcurl
# (pycurl/pycurl#827); 7.46.0 raises pycurl.error instead.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pycurl_closed_handle_reset pycurl==7.45.6
