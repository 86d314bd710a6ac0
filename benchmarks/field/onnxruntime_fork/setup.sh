#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv onnxruntime_fork onnxruntime==1.30.0 onnx==1.23.1 numpy==2.4.6 protobuf==7.36.2
