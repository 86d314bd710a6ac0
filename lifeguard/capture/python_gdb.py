"""Finding the python-gdb extension of the interpreter under capture: gdb needs it for Python frames."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lifeguard.proc.procfs import LIBPYTHON, mapped_libpythons

# Where Debian/Fedora install python-gdb extensions of a distribution Python
# (python3.X-dbg): the objfile's absolute path below this folder, plus "-gdb.py".
SYSTEM_AUTO_LOAD_DIR = Path("/usr/share/gdb/auto-load")


def find_python_gdb(python_exe: str | os.PathLike[str]) -> Path | None:
    """The interpreter's own python-gdb extension (what ``py-bt`` needs), or None.

    CPython installs it beside the executable ("python3.11-gdb.py", what pyenv and
    a source build do) or beside a shared libpython ("libpython3.11.so.1.0-gdb.py");
    distributions put it under /usr/share/gdb/auto-load/<objfile path>-gdb.py.
    Only the extension that belongs to this very interpreter is useful: its
    struct layouts are version specific.
    """
    exe = Path(os.path.realpath(python_exe))
    candidates = [exe.with_name(exe.name + "-gdb.py")]
    candidates += [library.with_name(library.name + "-gdb.py") for library in _libpythons_beside(exe)]
    candidates += [SYSTEM_AUTO_LOAD_DIR / str(path).lstrip("/") for path in candidates]
    return next((c for c in candidates if c.is_file()), None)


def _libpythons_beside(exe: Path) -> list[Path]:
    """The shared libpython of the same version in the installation prefix (<prefix>/lib).

    Only when the executable's name tells its version ("python3.11"): a prefix
    such as /usr may hold the libraries of several Pythons.
    """
    version = re.fullmatch(r"python(\d+\.\d+[a-z]*)", exe.name)
    if version is None:
        return []
    lib_dir = exe.parent.parent / "lib"
    try:
        return sorted(p for p in lib_dir.glob(f"libpython{version.group(1)}.so*") if LIBPYTHON.match(p.name))
    except OSError:
        return []


def python_gdb_for_pid(pid: int, exe: str | None) -> Path | None:
    """python-gdb extension of a live process: from its executable or its mapped libpython."""
    if exe:
        found = find_python_gdb(exe)
        if found:
            return found
    for library in mapped_libpythons(pid):
        candidate = library.with_name(library.name + "-gdb.py")
        for path in (candidate, SYSTEM_AUTO_LOAD_DIR / str(candidate).lstrip("/")):
            if path.is_file():
                return path
    return None
