"""A fresh child's first lines (its ``-c`` code) and the bundle of the modules they load (lifeguard.child.bundle),
written for each interpreter by that interpreter and kept while lifeguard's sources stay as they were."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import zlib

from lifeguard.cache import cache_folder
from lifeguard.child import protocol
from lifeguard.child.bundle import KEY_SIZE, read_manifest
from lifeguard.run import childpath

# A fresh child's first lines: the bundle of the modules it imports (child.bundle), when the file there still has
# the key the supervisor checked, then the bootstrap; a missing or replaced bundle means the usual imports.
BUNDLED_BOOT = """\
import sys, marshal
sys.path.insert(0, {path_dir!r})
try:
    with open({bundle!r}, "rb") as f:
        data = f.read()
except OSError:
    data = b""
if data[:{size}] == {key!r}:
    code, modules = marshal.loads(data[{size}:])
    space = {{"__name__": "lifeguard.child.bundle"}}
    exec(code, space)
    space["install"](modules)
    del code, modules, space
del data
{bootstrap}; bootstrap.main()
"""


def boot_code(path_dir: str, bundle: tuple[str, bytes] | None) -> str:
    """The child's ``-c`` code: the bootstrap from ``path_dir``, its modules from ``bundle`` (path, key) if given."""
    if bundle is None:
        return f"import sys; sys.path.insert(0, {path_dir!r}); {protocol.BOOTSTRAP}; bootstrap.main()"
    path, key = bundle
    return BUNDLED_BOOT.format(path_dir=path_dir, bundle=path, size=len(key), key=key, bootstrap=protocol.BOOTSTRAP)


BUNDLE_TIMEOUT = 60.0
_bundle_lock = threading.Lock()  # the workers' first runs start together: one bundle made, not one a worker


def child_bundle(executable: str, version: tuple[int, ...]) -> tuple[str, bytes] | None:
    """The bundle of the modules a fresh child imports (child.bundle) for this interpreter: its path and key.
    Written by that interpreter (marshal's format is its own) when missing or made from other sources, once a
    session at most; None when it cannot be (the child imports its modules one by one, as before)."""
    with _bundle_lock:
        return _child_bundle(executable, version)


@functools.cache
def _child_bundle(executable: str, version: tuple[int, ...]) -> tuple[str, bytes] | None:
    path_dir = childpath.child_path_folder()
    try:
        identity = f"{executable}\0{version}\0{os.stat(executable).st_mtime_ns}\0{path_dir}"
    except OSError:
        return None
    folder = os.path.join(cache_folder(), protocol.BUNDLE_DIR)  # not on the child's path: no package to import
    path = os.path.join(folder, f"{zlib.crc32(identity.encode(errors='surrogateescape')):08x}.bin")
    found = read_manifest(path)
    if found is not None and _sources_unchanged(found[1]):
        return path, found[0]
    key = os.urandom(KEY_SIZE)
    code = (f"import sys; before = set(sys.modules); sys.path.insert(0, {path_dir!r}); "
            f"from lifeguard.child import bundle; bundle.write({path!r}, {key!r}, before)")
    try:
        os.makedirs(folder, exist_ok=True)
        subprocess.run([executable, "-I", "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=BUNDLE_TIMEOUT, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    found = read_manifest(path)
    return (path, key) if found is not None and found[0] == key else None


def _sources_unchanged(sources: list[tuple[str, int, int]]) -> bool:
    try:
        return all((stat.st_mtime_ns, stat.st_size) == (mtime, size)
                   for path, mtime, size in sources for stat in [os.stat(path)])
    except OSError:
        return False
