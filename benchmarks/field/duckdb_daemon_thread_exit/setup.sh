#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# duckdb 1.1.0 is the release duckdb/duckdb#13904 was reported against.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv duckdb_daemon_thread_exit duckdb==1.1.0
