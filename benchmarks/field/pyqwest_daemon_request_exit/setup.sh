#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pyqwest 0.6.0, the newest release named in curioswitch/pyqwest#164 (a SyncClient request in
# flight on a daemon thread crashes the process at interpreter exit).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pyqwest_daemon_request_exit pyqwest==0.6.0
