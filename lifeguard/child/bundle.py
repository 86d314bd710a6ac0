"""The modules every fresh child imports, served from one file of their bytecode.

A fresh child imports about ten of lifeguard's modules before a scenario's body starts; finding and reading each
one's bytecode file on its own was a third of their cost (over half a millisecond of every run). The supervisor
has the bundle written once for each interpreter, by that interpreter (``write``, from lifeguard.run.boot), and
keeps it while the sources stay as they were. A child's first lines (lifeguard.run.boot.boot_code) read the file
and, when its key is the one the supervisor checked, run this module's code from it and call ``install``: a
finder, first on ``sys.meta_path``, that executes each bundled module's code as the import system asks for it
(so modules, specs and parents are as a normal import makes them). It takes itself out once every module it
holds has been imported: the program's own imports never meet it.

Standard library only, and nothing of lifeguard at module level: this code runs before lifeguard is importable.
"""

import marshal
import os
import sys

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import Any

KEY_SIZE = 16  # the file starts with its key: the supervisor names it in the child's command line


class BundleFinder:
    """Finds and loads the bundled modules, each once; gone from ``sys.meta_path`` after the last."""

    def __init__(self, modules: "dict[str, tuple[str, bool, CodeType]]") -> None:
        self._modules = modules  # name -> (source path, is a package, code)

    def find_spec(self, name: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        found = self._modules.get(name)
        if found is None:
            return None
        from _frozen_importlib import ModuleSpec as Spec  # loaded by every interpreter: no import at all

        origin, package, _ = found
        loader: Any = self  # a loader by its methods (importlib.abc would cost the child its import)
        spec: ModuleSpec = Spec(name, loader, origin=origin, is_package=package)
        if package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        spec.has_location = True  # __file__ set, as a module imported from its file has it
        return spec

    def create_module(self, spec: "ModuleSpec") -> None:
        return None  # the import system's own module object

    def exec_module(self, module: "ModuleType") -> None:
        _, _, code = self._modules[module.__name__]
        try:
            exec(code, module.__dict__)
        finally:
            del self._modules[module.__name__]
            if not self._modules and self in sys.meta_path:
                sys.meta_path.remove(self)


def install(modules: "dict[str, tuple[str, bool, CodeType]]") -> None:
    """Serve ``modules`` to the imports that follow (the child's own first lines call this)."""
    if modules:
        sys.meta_path.insert(0, BundleFinder(modules))


def write(target: str, key: bytes, before: "set[str]") -> None:
    """Import the bootstrap and write the bundle of the lifeguard modules that importing it loaded (every one
    not in ``before``) to ``target``: the key, this module's code and the modules' code marshalled by this
    interpreter (``marshal.loads`` ignores what follows), then the manifest (``read_manifest``). Run by the
    child's interpreter, in a process of its own (lifeguard.run.boot.child_bundle)."""
    import json

    from lifeguard.child import bootstrap  # noqa: F401  (what it loads is what a child loads)

    modules = {}
    sources = [__file__]
    for name in sorted(set(sys.modules) - before):
        module = sys.modules[name]
        path = getattr(module, "__file__", None)
        if name != __name__ and (name == "lifeguard" or name.startswith("lifeguard.")) and path:
            with open(path, "rb") as f:
                source = f.read()
            modules[name] = (path, hasattr(module, "__path__"), compile(source, path, "exec", dont_inherit=True))
            sources.append(path)
    with open(__file__, "rb") as f:
        own = compile(f.read(), __file__, "exec", dont_inherit=True)
    manifest = json.dumps({"key": key.hex(), "sources": [[path, stat.st_mtime_ns, stat.st_size]
                                                          for path in sources for stat in [os.stat(path)]]}).encode()
    data = key + marshal.dumps((own, modules)) + manifest + len(manifest).to_bytes(4, "little")
    partial = f"{target}.{os.getpid()}"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, target)


MANIFEST_LIMIT = 1 << 20


def read_manifest(path: str) -> "tuple[bytes, list[tuple[str, int, int]]] | None":
    """A bundle's key and the sources it was made from (path, mtime in ns, size), from its end; None when the
    file is missing or not a whole bundle. Read by the supervisor, whatever interpreter wrote it."""
    import json

    try:
        with open(path, "rb") as f:
            key = f.read(KEY_SIZE)
            size = f.seek(0, os.SEEK_END)
            f.seek(size - 4)
            length = int.from_bytes(f.read(4), "little")
            if len(key) != KEY_SIZE or not 0 < length <= min(MANIFEST_LIMIT, size - KEY_SIZE - 4):
                return None
            f.seek(size - 4 - length)
            manifest = json.loads(f.read(length))
        if manifest["key"] != key.hex():
            return None
        return key, [(str(p), int(m), int(s)) for p, m, s in manifest["sources"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
