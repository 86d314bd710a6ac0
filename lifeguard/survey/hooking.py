"""Which hook drives each package in its probes: the user's, the package's own, lifeguard's, or the generic one.

A hook is ``FUNC(module)``, called with the probed module: it does what a typical program does with the
package (makes its objects, starts its thread pool, hands it a callback) and returns what it made (the exit
probe keeps it alive until exit, the gc-thread probe drops it on a reference cycle). In order of precedence:

1. ``--hooks FILE``: a Python file with ``HOOKS = {"distribution": function, ...}`` (module-level functions
   of the file) and optionally ``MODULES = {"distribution": ["module", ...]}``, the modules to probe;
2. the package's own, through the entry point group ``lifeguard.hooks`` (name: the distribution, value:
   ``module:function``, a module installed with some distribution of the target environment);
3. lifeguard's, one file per package in lifeguard/survey/hooks/ (``def hook(module)``, optionally
   ``MODULES = (...)``);
4. the generic hook (hooks/generic.py): import, then introspect with care.

Files are read here as text (ast), never run: hooks run only in the probes' children.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifeguard.errors import SurveyError
from lifeguard.model.survey import HookRef

BUNDLED = Path(__file__).with_name("hooks")
GENERIC = HookRef("generic", str(BUNDLED / "generic.py"), "hook")


def canonical(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class HookChoice:
    hook: HookRef
    modules: tuple[str, ...] = ()  # the hook's choice of modules to probe; () lets the survey choose


def _parse(path: Path, what: str) -> ast.Module:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except OSError as exc:
        raise SurveyError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    except SyntaxError as exc:
        raise SurveyError(f"{what} {path}:{exc.lineno}: syntax error: {exc.msg}") from None


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _functions(tree: ast.Module) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _module_list(node: ast.expr, where: str) -> tuple[str, ...]:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise SurveyError(f"{where}: MODULES must be written out (strings in a list or tuple)") from None
    if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
        raise SurveyError(f"{where}: MODULES must be a list of module names")
    return tuple(value)


def read_hooks_file(path: Path) -> dict[str, HookChoice]:
    """``--hooks FILE``: its HOOKS mapping (and MODULES), by canonical distribution name."""
    tree = _parse(path, "--hooks")
    where = f"--hooks {path}"
    mapping = _assigned(tree, "HOOKS")
    if not isinstance(mapping, ast.Dict):
        raise SurveyError(f"{where}: defines no HOOKS = {{'distribution': function, ...}}")
    functions = _functions(tree)
    modules: dict[str, tuple[str, ...]] = {}
    listed = _assigned(tree, "MODULES")
    if listed is not None:
        if not isinstance(listed, ast.Dict):
            raise SurveyError(f"{where}: MODULES must be a dict {{'distribution': ['module', ...]}}")
        for key, value in zip(listed.keys, listed.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise SurveyError(f"{where}:{value.lineno}: MODULES keys must be distribution names (strings)")
            modules[canonical(key.value)] = _module_list(value, f"{where}:{value.lineno}")
    found: dict[str, HookChoice] = {}
    for key, value in zip(mapping.keys, mapping.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise SurveyError(f"{where}:{value.lineno}: HOOKS keys must be distribution names (strings)")
        if not (isinstance(value, ast.Name) and value.id in functions):
            raise SurveyError(f"{where}:{value.lineno}: the hook of {key.value!r} must name a function "
                              "defined at the top of the file")
        found[canonical(key.value)] = HookChoice(HookRef("user", str(path.resolve()), value.id),
                                                 modules.get(canonical(key.value), ()))
    return found


def entry_point_hooks(declared: tuple[dict[str, Any], ...]) -> tuple[dict[str, HookChoice], list[str]]:
    """The inventory's ``lifeguard.hooks`` entry points, and a line for each that cannot be used."""
    found: dict[str, HookChoice] = {}
    problems: list[str] = []
    for point in declared:
        label = f"entry point {point['name']} = {point['value']} (group lifeguard.hooks)"
        if not point.get("function") or not point.get("path"):
            problems.append(f"{label}: not module:function, or its module is not among its distribution's files")
            continue
        found.setdefault(canonical(point["name"]), HookChoice(HookRef("entry-point", point["path"],
                                                                      point["function"])))
    return found, problems


def bundled_hook(distribution: str) -> HookChoice | None:
    path = BUNDLED / f"{canonical(distribution).replace('-', '_')}.py"
    if not path.is_file() or path == Path(GENERIC.path):
        return None
    tree = _parse(path, "bundled hook")
    listed = _assigned(tree, "MODULES")
    modules = _module_list(listed, str(path)) if listed is not None else ()
    return HookChoice(HookRef("bundled", str(path), "hook"), modules)


def hook_for(distribution: str, user: dict[str, HookChoice], declared: dict[str, HookChoice]) -> HookChoice:
    name = canonical(distribution)
    return user.get(name) or declared.get(name) or bundled_hook(name) or HookChoice(GENERIC)


def hook_source(hook: HookRef) -> str:
    """The hook's file as text, for a reproduction script."""
    return Path(hook.path).read_text(encoding="utf-8") if os.path.isfile(hook.path) else ""
