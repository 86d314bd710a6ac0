#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# pyzmq 23.2.1 is the first release with Python 3.11 wheels and the last one whose
# Context.__exit__ / __del__ call term() (zeromq/pyzmq#1757; 24.0.0 calls destroy()).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv pyzmq_context_exit_hang pyzmq==23.2.1
