"""os and importlib functions lifeguard's own code calls in a run's process, as the interpreter made them.

A library may replace os's functions in the process it runs in: gevent's monkey-patching makes os.close refuse a
descriptor number it saw closed before (lifeguard's own close of a reused number raised in a test's process and
failed a test that passed), and its os.waitpid waits in its event loop, which a wait of lifeguard's must not
enter. posix's functions are the originals, whatever was done to os. A file is loaded as a module by the
interpreter's own frozen importlib: importlib.util imports contextlib, collections and functools first, about 4.8
ms of every run's start in an interpreter whose site did not load them already (a virtual environment's)."""

import os
import sys
from posix import close, waitpid

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from typing import Any

__all__ = ["cached_code", "close", "file_module", "pyc_header", "waitpid"]


def file_module(name: str, path: str) -> "Any":
    """A new module for the Python file ``path``, named ``name``, not yet run nor in sys.modules (its
    ``__spec__.loader.exec_module`` runs it), as importlib.util's spec_from_file_location and module_from_spec
    make it; None if it cannot be loaded as a Python file."""
    spec = sys.modules["_frozen_importlib_external"].spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    return sys.modules["_frozen_importlib"].module_from_spec(spec)


def pyc_header(path: str) -> bytes:
    """The 16-byte header a .pyc of the Python file ``path`` as it is now starts with, for this interpreter
    (magic number, timestamp-based, the source's mtime and size, as importlib writes and checks it). Raises
    OSError when the file cannot be read."""
    stat = os.stat(path)
    magic: bytes = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    return (magic + bytes(4)
            + (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little"))


def cached_code(path: str, bytecode: str) -> "Any":
    """The code of the Python file ``path`` from ``bytecode``, a .pyc the supervisor compiled for this interpreter
    (lifeguard.run.launch.file_bytecode), while it is that of the file as it is now (the header's mtime and size,
    as importlib checks a .pyc); None when it is not."""
    try:
        with open(bytecode, "rb") as f:
            data = f.read()
        if data[:16] == pyc_header(path):
            import marshal  # built in, and loaded already by importlib

            return marshal.loads(data[16:])
    except (OSError, ValueError, EOFError, TypeError):
        pass
    return None
