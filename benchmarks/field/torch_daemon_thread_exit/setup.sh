#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# torch 2.13.0 is the CPU wheel (torch-2.13.0+cpu) that pip finds on local disk here.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv torch_daemon_thread_exit torch==2.13.0 numpy==2.4.6
