#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# grpcio-observability 1.85.0 (the newest release here) still starts its export thread as a
# non-daemon thread that only deregister_global() stops (grpc/grpc#38500, reported on 1.69.0).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv grpcio_observability_exit_hang grpcio==1.85.0 grpcio-observability==1.85.0 \
    opentelemetry-api==1.45.3 typing_extensions==4.16.0
