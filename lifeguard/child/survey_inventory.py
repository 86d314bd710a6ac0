"""The survey's inventory, run in the TARGET interpreter: installed distributions and their extension modules.

It reads installed metadata only (importlib.metadata: each distribution's RECORD, ``files()``, and its
entry points), never imports a distribution's code, and prints one JSON document on stdout. It depends on
the standard library alone: the target may be another Python, in a venv without lifeguard. The supervisor
runs it in a bounded child (lifeguard.survey.inventory).

An installed file is an extension module when it sits under the installation's import root, ends in an
extension suffix (``.so``, ``.pyd``, with or without an ABI tag: ``x.cpython-311-x86_64-linux-gnu.so``,
``x.abi3.so``), every folder on its path is an identifier, and the file exports ``PyInit_<name>``: wheels
also ship plain shared libraries under the package (``scipy/special/libsf_error_state.so``), which no
``import`` can load.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import sys
from typing import Any

HOOK_GROUP = "lifeguard.hooks"  # entry points: name = distribution, value = module:function
EXTENSION_SUFFIXES = (".so", ".pyd")
# How much of an extension file is searched for its PyInit_ symbol (the dynamic symbol table is near the start
# of an ELF file, but a file is only mapped, never read whole).
SYMBOL_SEARCH_LIMIT = 512 * 1024 * 1024


def module_name_of(relative: str) -> str | None:
    """The dotted module name of an installed file (a RECORD path, '/'-separated), or None when it is not
    an extension module's file by its name."""
    if relative.startswith(("/", "..")) or not relative.endswith(EXTENSION_SUFFIXES):
        return None
    parts = relative.split("/")
    stem = parts[-1].split(".", 1)[0]  # x.cpython-311-x86_64-linux-gnu.so, x.abi3.so, x.so -> x
    names = [*parts[:-1], stem]
    if not all(name.isidentifier() for name in names):
        return None  # numpy.libs/..., a dist-info's folder, a vendored libfoo-1a2b3c.so
    return ".".join(names)


def exports_init(path: str, module: str) -> bool:
    """Does the file at ``path`` define the module's init function (PyInit_<last part of the name>)?"""
    symbol = b"PyInit_" + module.rsplit(".", 1)[-1].encode() + b"\0"
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return False
            with mmap.mmap(handle.fileno(), min(size, SYMBOL_SEARCH_LIMIT), access=mmap.ACCESS_READ) as data:
                return data.find(symbol) >= 0
    except (OSError, ValueError):
        return False


def canonical(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def describe(dist: Any) -> dict[str, Any]:
    """One distribution: its name, version, extension modules, and the hooks it declares for lifeguard."""
    extensions: list[str] = []
    files: dict[str, str] = {}  # relative path -> absolute path
    for entry in dist.files or ():
        relative = str(entry).replace(os.sep, "/")
        files[relative] = str(dist.locate_file(entry))
        module = module_name_of(relative)
        if module is not None and exports_init(files[relative], module):
            extensions.append(module)
    hooks = []
    for point in dist.entry_points:
        if point.group != HOOK_GROUP:
            continue
        module, _, function = point.value.partition(":")
        relative = module.replace(".", "/")
        path = files.get(relative + ".py") or files.get(relative + "/__init__.py")
        hooks.append({"name": point.name, "value": point.value, "module": module, "function": function.strip(),
                      "path": path})
    return {"name": dist.metadata["Name"] or "", "version": dist.version or "", "extensions": sorted(extensions),
            "hooks": hooks, "location": str(dist.locate_file(""))}


def inventory(names: list[str]) -> dict[str, Any]:
    """Every distribution (``names`` empty) or the named ones; the names not installed listed apart."""
    from importlib import metadata

    found: dict[str, dict[str, Any]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonical(name) in found:
            continue  # a second installation of a name is shadowed by the first on sys.path
        if names and canonical(name) not in {canonical(n) for n in names}:
            continue
        found[canonical(name)] = describe(dist)
    missing = [n for n in names if canonical(n) not in found]
    # Hooks for other distributions, from every installed one (a plugin package may ship hooks for a library).
    declared: list[dict[str, Any]] = []
    if names:
        for dist in metadata.distributions():
            if canonical(dist.metadata["Name"] or "") not in found and any(
                    point.group == HOOK_GROUP for point in dist.entry_points):
                declared.extend(describe(dist)["hooks"])
    for item in found.values():
        declared.extend(item["hooks"])
    ordered = [found[canonical(n)] for n in names if canonical(n) in found] if names else list(found.values())
    return {"python": sys.executable, "distributions": ordered, "missing": missing, "hooks": declared}


def main(argv: list[str]) -> None:
    json.dump(inventory(argv), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
