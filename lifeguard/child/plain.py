"""Plain targets inside the child: a script, ``-m module`` or ``-c code`` run as ``python`` itself runs them.

What the program sees is what Python's own command line gives it: ``sys.argv`` (the script path as typed,
the module's file for ``-m``, ``'-c'`` for code, then the arguments), ``sys.path[0]`` (the script's folder,
the working directory for ``-m``, ``''`` for ``-c``), and its code runs in the real ``__main__`` module, so
its globals live until the interpreter finalizes them (a native object held by a global is released during
finalization, as under ``python script.py``, not when the body returns). lifeguard's own modules are taken
out of ``sys.modules`` and ``sys.path`` first: the program imports its own ``lifeguard``, if it has one.
An uncaught exception is printed without lifeguard's frames and exits 1, as Python does.
"""

from __future__ import annotations

import os
import sys

from lifeguard.child import protocol, unpatched

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# The folder holding the link to lifeguard that the bootstrap's command line put on sys.path.
_CHILD_DIR = os.path.dirname(os.path.abspath(__file__))
_PATH_DIR = os.path.dirname(os.path.dirname(_CHILD_DIR))


def _main_namespace() -> dict[str, Any]:
    """``__main__``'s globals without what the bootstrap's ``-c`` line left there (its own imports)."""
    namespace = sys.modules["__main__"].__dict__
    for name in [n for n in namespace if not (n.startswith("__") and n.endswith("__"))]:
        del namespace[name]
    return namespace


def _set_path0(entry: str) -> None:
    """Python's ``sys.path[0]`` for this kind of target, in place of the ``''`` of the bootstrap's ``-c``."""
    if _PATH_DIR in sys.path:
        sys.path.remove(_PATH_DIR)
    if sys.path and sys.path[0] == "":
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


def prepare(spec: protocol.ChildSpec) -> Callable[[], object]:
    """Set ``sys.argv``, ``sys.path`` and ``__main__`` for a plain target; return its body."""
    kind = spec["kind"]
    argv = list(spec.get("argv") or ())
    if kind == "module":
        import runpy

        _set_path0(os.getcwd())
        sys.argv = ["-m", *argv[1:]]  # runpy puts the module's file in argv[0], as `python -m` does
        module = spec["module"]
        return lambda: runpy._run_module_as_main(module, alter_argv=True)  # type: ignore[attr-defined]
    namespace = _main_namespace()
    if kind == "code":
        _set_path0("")
        sys.argv = argv or ["-c"]
        source = spec["code"] or ""  # (kind "code" always carries its code)
        return lambda: exec(source, namespace)  # named "<string>", as `python -c` names it; no compile(): below
    # importlib's own loader class, as `python script.py` sets it, without importing importlib.machinery
    # (three more modules for every run's program to tear down at exit).
    SourceFileLoader = sys.modules["_frozen_importlib_external"].SourceFileLoader

    path = spec["path"]
    _set_path0(os.path.dirname(os.path.realpath(path)))
    sys.argv = argv or [path]
    namespace.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path),
                     __package__=None, __spec__=None)
    bytecode = spec.get("bytecode")
    return lambda: exec(script_code(path, bytecode), namespace)


def script_code(path: str, bytecode: str | None) -> Any:
    """The script's code object: from ``bytecode`` (compiled by the supervisor) while it is that of the script as it
    is now (unpatched.cached_code), else compiled here.

    Python's builtin compile() makes the interpreter build its 124 ast node types on first use (PyAST_Check),
    which ``python script.py`` never does (it parses in C): freeing them at exit made every run's finalization
    about a millisecond longer here, and a native thread racing the interpreter's exit lost races it wins
    without lifeguard (benchmarks/fidelity.py)."""
    code = unpatched.cached_code(path, bytecode) if bytecode else None
    if code is not None:
        return code
    with open(path, "rb") as f:
        source = f.read()
    return compile(source, path, "exec")


def report_uncaught(exc: BaseException) -> None:
    """Print an uncaught exception as Python would (lifeguard's own frames left out), then exit 1."""
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == _CHILD_DIR:
        tb = tb.tb_next
    # The exception's own traceback is what gets printed (CPython ignores the argument when it has one).
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    raise SystemExit(1)
