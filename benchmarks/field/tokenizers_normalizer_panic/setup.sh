#!/usr/bin/env bash
# Creates the venv of this case (idempotent) and prints its python as the last line.
# tokenizers 0.23.3 (the newest release here) still panics on huggingface/tokenizers#736
# (reported on 0.10.3, closed as stale, never fixed).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../_venv.sh"
make_venv tokenizers_normalizer_panic tokenizers==0.23.3
