"""Two scenarios of one selection never share an evidence folder: names must stay apart once made safe for a
folder name (``runs/<name>-<variant>-<n>/``), and a collision names both definitions."""

from __future__ import annotations

from typing import Any

import pytest

from lifeguard.errors import ScenarioDefinitionError
from lifeguard.model.scenario import EVIDENCE_NAME_LIMIT, Scenario, check_unique_names, evidence_name, unique_selection


def scenario(name: str, path: str = "/work/a.py", line: int = 3, **changes: Any) -> Scenario:
    return Scenario(name=name, function="body", path=path, line=line, fixture=None, expect={"default": "passed"},
                    timeout=20.0, repeat={"*": 1}, **changes)


def test_the_folder_name_is_the_scheduler_s() -> None:
    assert evidence_name("case 1/../x") == "case_1_.._x"
    assert len(evidence_name("n" * 200)) == EVIDENCE_NAME_LIMIT


@pytest.mark.parametrize(("first", "second", "why"), [
    (scenario("same", "/work/a.py", 3), scenario("same", "/work/b.py", 9), "have the same name"),
    (scenario("case 1", line=3), scenario("case_1", line=7), "names that share the folder name 'case_1'"),
    (scenario("x" * 80 + "a"), scenario("x" * 80 + "b", line=9), "names that share the folder name"),
])
def test_a_collision_names_both_definitions(first: Scenario, second: Scenario, why: str) -> None:
    with pytest.raises(ScenarioDefinitionError) as raised:
        check_unique_names([scenario("other"), first, second])
    text = str(raised.value)
    assert f"({first.where})" in text and f"({second.where})" in text and why in text, text
    assert "rename one" in text


def test_distinct_names_pass_and_one_definition_selected_twice_runs_once() -> None:
    a, b = scenario("a"), scenario("b", line=9)
    check_unique_names([a, b])
    assert unique_selection([a, b, scenario("a")]) == [a, b]
    with pytest.raises(ScenarioDefinitionError, match="is selected twice"):
        check_unique_names([a, scenario("a")])
