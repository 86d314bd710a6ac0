"""Probes as generated scenario files: hooks checked without running them, one scenario per probe kind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lifeguard.errors import UsageError
from lifeguard.plan.probes import (
    BODY_FUNCTIONS,
    FORK_CHILD_SHARE,
    HANG_SETTLE,
    PROBE_PERTURBATIONS,
    PROBES,
    parse_hook,
    probe_options,
    probe_scenarios,
)

# The same cases and messages as the command line shows them (tests/integration/test_probes.py).
BAD_HOOKS = [
    ("hooks.py", "expected FILE.py:FUNC"),
    ("missing.py:exercise", "no such file missing.py"),
    ("hooks.py:absent", "hooks.py defines no function 'absent'"),
    ("broken.py:exercise", "broken.py:1: syntax error"),
]


@pytest.fixture
def hook_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "hooks.py").write_text("def exercise(module):\n    pass\n\nalias = exercise\n")
    (tmp_path / "broken.py").write_text("def exercise(module:\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("hook", "message"), BAD_HOOKS)
def test_bad_hooks_are_usage_errors(hook_folder: Path, hook: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_hook(hook, "--hook")


def test_a_good_hook_is_read_never_run(hook_folder: Path) -> None:
    assert parse_hook("hooks.py:exercise", "--hook") == {
        "path": str(hook_folder / "hooks.py"), "qualname": "exercise", "module_name": None, "sys_path": []}
    assert parse_hook("hooks.py:alias", "--check")["qualname"] == "alias"  # a module-level name counts too
    (hook_folder / "explodes.py").write_text("raise SystemExit('ran')\n\ndef exercise(module):\n    pass\n")
    assert parse_hook("explodes.py:exercise", "--hook")["qualname"] == "exercise"


def test_probe_names_and_module_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown probe leak"):
        probe_scenarios("json", ["leak"], tmp_path)
    with pytest.raises(UsageError, match=re.escape("unknown probe (none)")):
        probe_scenarios("json", [], tmp_path)
    with pytest.raises(UsageError, match="is not a module name"):
        probe_scenarios("json.", ["exit"], tmp_path)
    assert not list(tmp_path.iterdir()), "nothing is written for a bad request"


def test_one_scenario_per_probe_kind_in_one_generated_file(tmp_path: Path) -> None:
    scenarios = probe_scenarios("pkg._native", ["fork", "exit", "fork-use"], tmp_path / "gen", timeout=7.5,
                                repeat=3)  # "fork" is the old name of fork-use
    assert [s.name for s in scenarios] == ["probe-fork-use[pkg._native]", "probe-exit[pkg._native]"]
    assert {s.path for s in scenarios} == {str(tmp_path / "gen" / "probe_pkg__native.py")}
    source = Path(scenarios[0].path).read_text()
    tree = ast.parse(source)  # the generated file is valid Python
    functions = {node.name: node.lineno for node in tree.body if isinstance(node, ast.FunctionDef)}
    for item in scenarios:
        assert item.timeout == 7.5 and item.repeat_for("default") == 3 and item.variants == ("default",)
        assert functions[item.function] == item.line, "each scenario points at its body's line"
        assert item.function == BODY_FUNCTIONS[item.name.removeprefix("probe-").partition("[")[0]]
    assert "'timeout': 7.5" in source and "'module': 'pkg._native'" in source
    assert f"'fork_child_timeout': {7.5 * FORK_CHILD_SHARE:g}" in source  # clearly shorter than the run's
    assert source.count("def probe_fork_use") == 1


def test_every_probe_runs_fresh_under_dev_mode_and_malloc_debug() -> None:
    options = probe_options(native=False)
    assert options.perturbations == PROBE_PERTURBATIONS == ("dev-mode", "malloc-debug")
    assert options.mode == "fresh" and options.cores is False
    assert options.hang_settle == HANG_SETTLE  # a hung probe ends once its tree stopped moving
    assert set(BODY_FUNCTIONS) == set(PROBES)
