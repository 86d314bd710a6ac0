#!/bin/bash
# A Debian sid chroot with CPython 3.14 (and its debug symbols, gdb, a compiler), for lifeguard's tests on 3.14.
#
#   scripts/py314-chroot.sh make [ROOT]            make the chroot once (about 1 GB), then print its root
#   scripts/py314-chroot.sh run ROOT [--] CMD...   run CMD inside, as root, with proc, sys, dev mounted for it
#   scripts/py314-chroot.sh umount ROOT            take down what `run` mounted (it does so itself on exit)
#   scripts/py314-chroot.sh test [ROOT] [ARGS...]  make it if needed, install this checkout in it (a venv,
#                                                   /opt/venv), run every bundled scenario, then pytest ARGS
#                                                   (default: the integration tests); what CI runs on 3.14
#
# ROOT defaults to ~/.cache/lifeguard/py314-root. The mirror is the host's own Debian mirror (its apt sources),
# or LIFEGUARD_DEBIAN_MIRROR. Root only: debootstrap, chroot and mount need it.
set -euo pipefail

default_root="${XDG_CACHE_HOME:-$HOME/.cache}/lifeguard/py314-root"
packages="python3.14 python3.14-dev python3.14-venv python3.14-dbg libc6-dbg gdb g++ make elfutils procps"
packages="$packages ca-certificates git"

die() { echo "py314-chroot: $*" >&2; exit 2; }

mirror() {
    if [ -n "${LIFEGUARD_DEBIAN_MIRROR:-}" ]; then echo "$LIFEGUARD_DEBIAN_MIRROR"; return; fi
    local uri
    # deb822 sources (URIs: ...) first, then one-line ones; the security archive is no mirror of sid.
    uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security |
          head -n 1 || true)
    if [ -z "$uri" ]; then
        uri=$(grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
              awk '{print $2}' | grep -v security | head -n 1 || true)
    fi
    [ -n "$uri" ] || die "no Debian mirror in this host's apt sources: set LIFEGUARD_DEBIAN_MIRROR"
    echo "$uri"
}

mounted() { grep -q " $(realpath "$1") " /proc/mounts; }

mount_all() {
    local root=$1
    mounted "$root/proc" || mount -t proc proc "$root/proc"
    mounted "$root/sys" || { mount --rbind /sys "$root/sys"; mount --make-rslave "$root/sys"; }
    mounted "$root/dev" || mount --bind /dev "$root/dev"
    mounted "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts"
}

umount_all() {
    local root=$1 path
    for path in dev/pts dev sys proc; do
        if mounted "$root/$path"; then umount -R "$root/$path" || umount -lR "$root/$path"; fi
    done
}

make_root() {
    local root=$1
    if [ -x "$root/usr/bin/python3.14" ] && [ -e "$root/.lifeguard-ready" ]; then echo "$root"; return; fi
    [ "$(id -u)" = 0 ] || die "making the chroot needs root"
    if [ -e "$root/.lifeguard-making" ]; then  # an earlier make of ours that did not finish: start again
        umount_all "$root"
        rm -rf --one-file-system "$root"
    fi
    [ ! -e "$root" ] || [ -z "$(ls -A "$root")" ] || die "$root exists and is no chroot of ours: choose another ROOT"
    command -v debootstrap >/dev/null || {
        apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    } || die "cannot install debootstrap"
    mkdir -p "$root"
    touch "$root/.lifeguard-making"
    local started=$SECONDS
    debootstrap --variant=minbase sid "$root" "$(mirror)" >"$root.debootstrap.log" 2>&1 ||
        die "debootstrap failed: see $root.debootstrap.log"
    # sid's Release on a mirror may be past its Valid-Until; the host's own CAs (pip's registry) inside too.
    echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99lifeguard"
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    [ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
    trap 'umount_all "$root"' EXIT
    mount_all "$root"
    # shellcheck disable=SC2086
    chroot "$root" /bin/sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $packages && update-ca-certificates" >"$root.apt.log" 2>&1 ||
        die "installing python3.14 in the chroot failed: see $root.apt.log"
    umount_all "$root"
    trap - EXIT
    rm "$root/.lifeguard-making"
    touch "$root/.lifeguard-ready"
    echo "py314-chroot: made $root in $((SECONDS - started)) s ($(du -sh "$root" | cut -f1))" >&2
    echo "$root"
}

run_in() {
    local root=$1
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "run: no command"
    [ -e "$root/.lifeguard-ready" ] || die "$root is no chroot made by 'make'"
    trap 'umount_all "$root"' EXIT
    mount_all "$root"
    local status=0
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 CI="${CI:-}" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-180}" \
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$@" || status=$?
    umount_all "$root"
    trap - EXIT
    return $status
}

test_in() {
    local root=$1 here started=$SECONDS
    shift
    here="$(cd "$(dirname "$0")/.." && pwd)"
    make_root "$root" >/dev/null
    # This checkout's tracked files (not its caches or builds), fresh each time.
    rm -rf --one-file-system "$root/root/lifeguard"
    mkdir -p "$root/root/lifeguard"
    (cd "$here" && git ls-files -z --cached | xargs -0 cp --parents -t "$root/root/lifeguard")
    run_in "$root" /bin/bash -c "cd /root/lifeguard && { [ -x /opt/venv/bin/python ] || python3.14 -m venv /opt/venv; } &&
        /opt/venv/bin/python -m pip install -q -e '.[test]'" || die "installing lifeguard in the chroot failed"
    echo "py314-chroot: $(chroot "$root" /opt/venv/bin/python -VV | head -n 1); ready in $((SECONDS - started)) s" >&2
    local command
    if [ $# -gt 0 ]; then
        command="/opt/venv/bin/python -m pytest -q$(printf ' %q' "$@")"
    else
        command="/opt/venv/bin/python -m lifeguard run && /opt/venv/bin/python -m pytest -q -rs tests/integration"
    fi
    # The browser tests of report.html run on the host (CI makes a missing chromium fail them there); the chroot
    # has no chromium, so here they skip, saying so.
    CI="" run_in "$root" /bin/bash -c "cd /root/lifeguard && $command"
}

# What a CPython build needs for the modules lifeguard and its tests use (ctypes, ssl for pip, sqlite3...).
freethreaded_deps="dpkg-dev xz-utils libffi-dev libssl-dev zlib1g-dev libbz2-dev liblzma-dev libsqlite3-dev"
freethreaded_deps="$freethreaded_deps libreadline-dev uuid-dev libexpat1-dev libzstd-dev pkg-config"

build_freethreaded() {
    local root=$1 started=$SECONDS prefix=/opt/python-freethreaded
    make_root "$root" >/dev/null
    if [ -e "$root$prefix/.lifeguard-ready" ]; then ls "$root$prefix"/bin/python3.*t; return; fi
    echo "deb-src $(mirror) sid main" >"$root/etc/apt/sources.list.d/lifeguard-src.list"
    run_in "$root" /bin/bash -c "set -e
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $freethreaded_deps >/dev/null
        rm -rf /root/build-freethreaded $prefix && mkdir -p /root/build-freethreaded && cd /root/build-freethreaded
        # A mirror may list sources it no longer serves: the newest that downloads.
        for package in python3.14 python3.13; do
            for version in \$(apt-cache showsrc \$package | sed -n 's/^Version: //p' | sort -rV); do
                apt-get source --download-only -q \$package=\$version >/dev/null 2>&1 && break 2
            done
        done
        tar xf python3.1*.orig.tar.* && cd Python-3.*/
        echo \"building \$(basename \$PWD) with --disable-gil\"
        ./configure -q --disable-gil --enable-shared --prefix=$prefix LDFLAGS=-Wl,-rpath,$prefix/lib >/dev/null
        make -s -j\$(nproc) >/dev/null 2>make.log || { tail -n 30 make.log; exit 1; }
        make -s install >/dev/null 2>>make.log
        exe=\$(ls $prefix/bin/python3.*t)
        # python-gdb beside the executable and the library, where lifeguard (and gdb) look for it.
        cp Tools/gdb/libpython.py \$exe-gdb.py
        for library in $prefix/lib/libpython3.*t.so.1.0; do cp Tools/gdb/libpython.py \$library-gdb.py; done
        \$exe -VV
        touch $prefix/.lifeguard-ready" >"$root.freethreaded.log" 2>&1 ||
        die "building the free-threaded interpreter failed: see $root.freethreaded.log"
    echo "py314-chroot: built $(tail -n 1 "$root.freethreaded.log") in $((SECONDS - started)) s" >&2
    ls "$root$prefix"/bin/python3.*t
}

case "${1:-}" in
    make) make_root "${2:-$default_root}" ;;
    run) [ $# -ge 2 ] || die "usage: $0 run ROOT [--] CMD..."; root=$2; shift 2; run_in "$root" "$@" ;;
    umount) umount_all "${2:-$default_root}" ;;
    freethreaded) build_freethreaded "${2:-$default_root}" ;;
    test) shift; root=$default_root; if [ -n "${1:-}" ] && [ "${1#-}" = "$1" ] && [ "${1#tests}" = "$1" ]; then
              root=$1; shift; fi; test_in "$root" "$@" ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
