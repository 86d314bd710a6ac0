"""@lifeguard.scenario checks its arguments where they are written, and records what it was given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import lifeguard
from lifeguard.errors import ScenarioDefinitionError
from lifeguard.model.scenario import DEFAULT_TIMEOUT, take_registered


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    take_registered()
    yield
    take_registered()


def declare(**arguments: Any) -> None:
    @lifeguard.scenario(**arguments)
    def body() -> None:
        """First paragraph.

        Second paragraph."""


def test_a_declared_scenario_is_recorded_with_its_defaults() -> None:
    declare()
    [item] = take_registered()
    assert (item.name, item.function, item.fixture, item.variants) == ("body", "body", None, ("default",))
    assert item.timeout == DEFAULT_TIMEOUT and item.repeat_for("default") == 1
    assert item.description == "First paragraph." and item.path == __file__ and item.line > 0
    assert item.where == f"{__file__}:{item.line}"
    assert take_registered() == []  # handed over once


def test_a_fixture_scenario_expects_per_variant() -> None:
    declare(fixture="tiny", expect={"buggy": "crashed@exit", "fixed": "passed"}, repeat={"buggy": 3, "*": 2},
            timeout=5, name="named", tags=("slow",), fork_server=True)
    [item] = take_registered()
    assert item.name == "named" and item.variants == ("buggy", "fixed") and item.timeout == 5.0
    assert item.repeat_for("buggy") == 3 and item.repeat_for("fixed") == 2
    assert str(item.expectation("buggy", (3, 11))) == "crashed@exit"
    assert item.tags == ("slow",) and item.fork_server
    assert take_registered() == []


@pytest.mark.parametrize(("arguments", "message"), [
    ({"expect": {"default": "exploded"}}, "unknown outcome 'exploded'"),
    ({"expect": {"buggy": "passed"}}, "variants buggy/fixed need a fixture="),
    ({"fixture": "tiny", "expect": {"default": "passed"}}, "a fixture scenario expects per variant"),
    ({"expect": {}}, "expect must be a non-empty dict"),
    ({"expect": {"patched": "passed"}}, "unknown variant 'patched'"),
    ({"expect": {"default": {">=x": "passed"}}}, "bad Python version key '>=x'"),
    ({"expect": {"default": {"*": 3}}}, "expectation for '*' must be a string"),
    ({"timeout": -1}, "timeout: -1 must be a positive number of seconds"),
    ({"timeout": float("nan")}, "timeout: nan must be a positive number of seconds"),
    ({"timeout": float("inf")}, "timeout: inf must be a positive number of seconds"),
    ({"timeout": "10"}, "timeout must be a positive number, got '10'"),
    ({"repeat": 0}, "repeat: 0 must be at least 1"),
    ({"repeat": True}, "repeat must be a positive int or a dict"),
    ({"repeat": {"buggy": 2}}, "repeat names unknown variant 'buggy'"),
])
def test_definition_errors_name_the_line(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioDefinitionError) as raised:
        declare(**arguments)
    text = str(raised.value)
    assert text.startswith(f"{__file__}:") and message in text, text
    assert take_registered() == []


def test_an_async_body_is_refused_where_it_is_written() -> None:
    """Calling an ``async def`` only makes a coroutine: the run would pass without running the body."""
    with pytest.raises(ScenarioDefinitionError) as raised:
        @lifeguard.scenario()
        async def body() -> None:
            raise AssertionError("never runs")
    text = str(raised.value)
    assert text.startswith(f"{__file__}:") and "scenario body body is an async def" in text, text
    assert "asyncio.run" in text
    assert take_registered() == []


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_a_generator_body_is_refused_too(kind: str) -> None:
    with pytest.raises(ScenarioDefinitionError, match="calling it would not run it"):
        if kind == "generator":
            @lifeguard.scenario()
            def body() -> Iterator[int]:
                yield 1
        else:
            @lifeguard.scenario()
            async def agen() -> Any:
                yield 1
    assert take_registered() == []
