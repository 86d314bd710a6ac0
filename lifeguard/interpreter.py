"""Facts about the interpreter that runs the children (which may not be our own)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

from lifeguard.errors import InterpreterError

QUERY_TIMEOUT = 30.0

_QUERY = """
import json, sys, sysconfig
print(json.dumps({
    "executable": sys.executable,
    "version": list(sys.version_info[:3]),
    "implementation": sys.implementation.name,
    "include": sysconfig.get_paths()["include"],
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or ".so",
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "ldlibrary": sysconfig.get_config_var("LDLIBRARY") or "",
}))
"""


@dataclass(frozen=True)
class Interpreter:
    """A resolved interpreter: the real binary, never a launcher shim."""

    executable: str
    version: tuple[int, int, int]
    include: str
    ext_suffix: str
    soabi: str
    libdir: str
    ldlibrary: str

    @property
    def short_version(self) -> tuple[int, int]:
        return (self.version[0], self.version[1])

    @property
    def free_threaded(self) -> bool:
        """A free-threaded build (``--disable-gil``, SOABI ``cpython-313t-...``): its GIL is off unless turned on."""
        return re.match(r"cpython-\d+t-", self.soabi) is not None

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    def to_dict(self) -> dict[str, object]:
        return {"executable": self.executable, "version": self.version_text, "soabi": self.soabi}


def _this_interpreter() -> Interpreter:
    import sysconfig

    version = sys.version_info
    if version < (3, 10):
        raise InterpreterError(f"lifeguard needs CPython 3.10 or newer, got {sys.version.split()[0]}")
    return Interpreter(
        executable=sys.executable, version=(version[0], version[1], version[2]),
        include=sysconfig.get_paths()["include"], ext_suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so",
        soabi=sysconfig.get_config_var("SOABI") or "", libdir=sysconfig.get_config_var("LIBDIR") or "",
        ldlibrary=sysconfig.get_config_var("LDLIBRARY") or "",
    )


@cache
def resolve(python: str | None = None) -> Interpreter:
    """Ask ``python`` (default: the interpreter lifeguard runs under) who it really is.

    A pyenv or virtualenv launcher may be a shell script: running it once and reading
    ``sys.executable`` gives the binary that gdb and the children must use.
    """
    target = python or sys.executable
    if target == sys.executable and sys.implementation.name == "cpython":
        return _this_interpreter()  # no need to ask: a child process would cost every `lifeguard run`
    if os.sep in target and not os.path.exists(target):
        raise InterpreterError(f"--python {target}: no such file")
    try:
        proc = subprocess.run(
            [target, "-I", "-c", _QUERY],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise InterpreterError(f"--python {target}: not found") from None
    except PermissionError:
        raise InterpreterError(f"--python {target}: not executable") from None
    except subprocess.TimeoutExpired:
        raise InterpreterError(f"--python {target}: did not answer within {QUERY_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InterpreterError(f"--python {target}: is not a usable Python ({tail[0]})")
    try:
        facts = json.loads(proc.stdout)
    except ValueError:
        raise InterpreterError(f"--python {target}: unexpected answer {proc.stdout[:200]!r}") from None
    version = tuple(facts["version"])
    if facts["implementation"] != "cpython" or version < (3, 10):
        raise InterpreterError(
            f"--python {target}: lifeguard needs CPython 3.10 or newer, got "
            f"{facts['implementation']} {'.'.join(map(str, version))}"
        )
    return Interpreter(
        # Not realpath: a venv's bin/python is a link to the base binary, and only
        # through the link does the child get the venv's site-packages.
        executable=facts["executable"],
        version=(int(version[0]), int(version[1]), int(version[2])),
        include=facts["include"],
        ext_suffix=facts["ext_suffix"],
        soabi=facts["soabi"],
        libdir=facts["libdir"],
        ldlibrary=facts["ldlibrary"],
    )
