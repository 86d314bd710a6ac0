# Shared by every case's setup.sh (sourced, not run): make_venv CASE REQUIREMENT...
#
# Creates (idempotently) the venv ${LIFEGUARD_FIELD_HOME:-$HOME/.cache/lifeguard/field}/CASE
# with the pinned requirements, using the real interpreter behind ${PYTHON:-python3.11}
# (a pyenv shim or a venv launcher is resolved through sys.executable), and prints the
# venv's python as the last line. A venv whose stamp lists the same interpreter and
# requirements is reused as is; any other one is rebuilt from scratch.
set -euo pipefail

make_venv() {
    local case_name=$1
    shift
    local home=${LIFEGUARD_FIELD_HOME:-$HOME/.cache/lifeguard/field}
    local venv=$home/$case_name
    local python
    python=$("${PYTHON:-python3.11}" -c 'import sys; print(sys.executable)')
    local stamp_text
    stamp_text=$(printf '%s\n' "python=$python" "$@")
    if [ -x "$venv/bin/python" ] && [ -f "$venv/.field-stamp" ] \
        && [ "$(cat "$venv/.field-stamp")" = "$stamp_text" ]; then
        echo "$venv/bin/python"
        return 0
    fi
    rm -rf "$venv"
    mkdir -p "$home"
    "$python" -m venv "$venv" >&2
    if [ "$#" -gt 0 ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-input "$@" >&2
    fi
    printf '%s\n' "$stamp_text" >"$venv/.field-stamp"
    echo "$venv/bin/python"
}
