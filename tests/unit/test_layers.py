"""The package's folders are the layers of the data flow: each imports only from the layers above it.

Every import counts, at module level and inside functions alike (an import deferred into a
function still ties the two modules together). Run this file alone to check the layout:
``python3 -m pytest -q tests/unit/test_layers.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lifeguard"

# Top to bottom, as in DESIGN.md's layout: a module may import its own layer and the layers above.
LAYERS = ("", "model", "child", "proc", "plan", "run", "capture", "diagnose", "report", "survey", "session",
          "cli", "pytest_plugin")
TOP_LEVEL = ("errors", "interpreter", "build", "cache")
# Entry shims, allowed to reach down: `python -m lifeguard` runs the CLI, and `@lifeguard.scenario`
# forwards to the decorator in model/ (lazily: the child never pays for it), or, in the discovery process,
# to child.discovery, which records the declaration as data.
# The package root also reads the child protocol's CHILD_ENV (the decorator is a no-op in a child).
ENTRY_SHIMS = {"lifeguard.__main__": {"lifeguard.cli.entry"},
               "lifeguard": {"lifeguard.model.scenario", "lifeguard.child.protocol", "lifeguard.child.discovery"}}
# The gdb script runs inside gdb's own Python, never imported by lifeguard.
NOT_MODULES = {"lifeguard.capture.gdb_script"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: path for name, path in found.items() if name not in NOT_MODULES}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The lifeguard modules ``path`` imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` imports pkg.mod when that is a module, else a name of pkg.
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in TOP_LEVEL or parts[1] == "__main__":
        return 0
    return LAYERS.index(parts[1])


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found)) - {name} for name, path in found.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_folder_is_a_known_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS[1:])
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top == set(TOP_LEVEL)


def test_no_import_cycles() -> None:
    assert find_cycle(graph()) is None


def test_layers_import_only_upwards() -> None:
    wrong = []
    for module, targets in graph().items():
        for target in targets - ENTRY_SHIMS.get(module, set()):
            if layer_of(target) > layer_of(module):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports from a lower layer:\n" + "\n".join(sorted(wrong))


def test_the_front_ends_share_the_session_layer_not_each_other() -> None:
    """The command line and the pytest plugin are two front ends over session/: neither imports the other, and
    session/ knows neither (what both need lives there once)."""
    front_ends = ("cli", "pytest_plugin")
    wrong = []
    for module, targets in graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in (*front_ends, "session"):
            continue
        for target in targets:
            layer = target.split(".")[1] if "." in target else ""
            if layer in front_ends and layer != parts[1]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "front ends tied together:\n" + "\n".join(sorted(wrong))


def test_the_child_side_needs_only_the_standard_library() -> None:
    """Code under child/ runs in the supervised interpreter, which may be another Python with
    none of lifeguard's dependencies; it may import the stdlib, child/ and the package root. The
    one exception: the loader of pytest test bodies rewrites asserts with pytest's own rewriter,
    in a child that runs a pytest test (so pytest is importable there)."""
    import sys

    wrong = []
    for path in (PACKAGE / "child").rglob("*.py"):
        pytest_side = {"_pytest", "pytest"} if path.name == "pytest_body.py" else set()
        allowed_roots = set(sys.stdlib_module_names) | pytest_side
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                if name == "lifeguard" or name.startswith("lifeguard.child"):
                    continue
                if name.split(".")[0] not in allowed_roots:
                    wrong.append(f"{path.name}:{node.lineno}: {name}")
    assert not wrong


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_module_over_400_lines(module: str) -> None:
    lines = len(modules()[module].read_text().splitlines())
    assert lines <= 400, f"{module} has {lines} lines: split it by job"


def test_the_checker_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_developer_docs_list_the_layers_in_order() -> None:
    """docs/development.md's layout table names every layer folder, top to bottom, as LAYERS does."""
    import re

    text = (PACKAGE.parent / "docs" / "development.md").read_text()
    listed = re.findall(r"^\| `(\w+)/` \|", text, flags=re.MULTILINE)
    assert listed == list(LAYERS[1:])


def test_every_package_folder_is_in_the_wheel() -> None:
    """pyproject.toml lists the packages a wheel holds: a folder missing there installs as nothing (the wheel's
    `lifeguard` then fails at its first import of it)."""
    import re

    text = (PACKAGE.parent / "pyproject.toml").read_text()  # read without tomllib: the suite runs on 3.10 too
    block = re.search(r"^packages = \[(.*?)\]", text, flags=re.MULTILINE | re.DOTALL)
    assert block is not None
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    folders = {".".join(path.parent.relative_to(PACKAGE.parent).parts) for path in PACKAGE.rglob("__init__.py")}
    assert folders <= listed, sorted(folders - listed)
