"""The child side of the pytest plugin: import a test module as pytest did, and call one test.

Runs inside a supervised child only (imported by the body file the plugin
generates). The test module is imported under the name pytest gave it, with
the pytest process's ``sys.path``, so sibling imports and packages resolve as
they did there; its asserts are rewritten as pytest would, so a failing
``assert`` explains itself in the run's stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from lifeguard import child
from lifeguard.child import protocol

# Events the parent reads to turn a child's pytest.skip() / pytest.xfail() into
# the same outcome of the pytest test.


def extend_sys_path(entries: list[str]) -> None:
    """Put the parent's import path in front, in the parent's order (duplicates skipped)."""
    sys.path[0:0] = [entry for entry in entries if entry not in sys.path]


def import_file(path: str, module_name: str | None, *, rewrite_asserts: bool = False) -> Any:
    """Import the Python file ``path`` as ``module_name`` (default: a name derived from the file)."""
    import importlib.util

    name = module_name or "lifeguard_user_" + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
        return sys.modules[name]
    if module_name is None:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        code = _rewritten_code(path) if rewrite_asserts else None
        if code is None:
            spec.loader.exec_module(module)
        else:
            exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _rewritten_code(path: str) -> Any:
    """The module's code with pytest's assert rewriting, or None where pytest cannot do it."""
    import ast

    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:
        return None
    with open(path, "rb") as f:
        source = f.read()
    tree = ast.parse(source, filename=path)
    try:
        rewrite_asserts(tree, source, path, None)
    except Exception:  # a pytest without this signature: plain asserts still work
        return None
    return compile(tree, path, "exec", dont_inherit=True)


def resolve_qualname(module: Any, qualname: str) -> Callable[..., Any]:
    """``func`` or ``TestClass.test_method`` (the class is instantiated without arguments, as pytest does)."""
    target: Any = module
    parts = qualname.split(".")
    for position, part in enumerate(parts):
        target = getattr(target, part)
        if isinstance(target, type) and position < len(parts) - 1:
            target = target()
    found: Callable[..., Any] = target
    return found


def load_callable(spec: dict[str, Any], *, rewrite_asserts: bool = False) -> Callable[..., Any]:
    """A module-level callable described by {path, qualname, module_name, sys_path}."""
    if spec.get("sys_path"):
        extend_sys_path(spec["sys_path"])
    module = import_file(spec["path"], spec.get("module_name"), rewrite_asserts=rewrite_asserts)
    return resolve_qualname(module, spec["qualname"])


class TestCall:
    """One test function and the arguments the parent sent for it."""

    def __init__(self, config: dict[str, Any]) -> None:
        import base64
        import pickle

        self.label = config["label"]
        self.function = load_callable(config["target"], rewrite_asserts=True)
        self.arguments: dict[str, Any] = pickle.loads(base64.b64decode(config["arguments"]))
        self.positional: tuple[Any, ...] = tuple(pickle.loads(base64.b64decode(config["positional"])))

    def __call__(self, module: Any = None) -> None:
        try:
            self.function(*self.positional, **self.arguments)
        except BaseException as exc:
            outcome = _pytest_outcome(exc)
            if outcome is None:
                raise
            # A skip or xfail is not a failure of the body: the process still
            # exits normally, and its exit is judged like any other.
            child.emit(protocol.PYTEST_OUTCOME, outcome=outcome, reason=str(getattr(exc, "msg", "") or exc))


def _pytest_outcome(exc: BaseException) -> str | None:
    pytest = sys.modules.get("pytest")
    if pytest is None:
        return None
    if isinstance(exc, pytest.xfail.Exception):
        return "xfailed"
    if isinstance(exc, pytest.skip.Exception):
        return "skipped"
    return None


def load_test(config: dict[str, Any]) -> TestCall:
    """Called at import of the generated body file, so a failing import is phase ``import``."""
    return TestCall(config)
