"""`@pytest.mark.lifeguard(...)`: its keywords, checked once; errors say "KEYWORD from marker on TEST: ..."."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from lifeguard.errors import MarkerError
from lifeguard.model.scenario import DEFAULT_TIMEOUT, DEFAULT_VARIANT, VARIANTS, ExpectSpec, resolve_expectation
from lifeguard.model.validate import positive_count, positive_seconds

MARKER_KEYWORDS = ("timeout", "repeat", "expect", "fixture", "variant")



@dataclass(frozen=True)
class MarkerOptions:
    """A validated ``@pytest.mark.lifeguard(...)``."""

    timeout: float
    repeat: dict[str, int]
    expect: dict[str, ExpectSpec]  # variant -> expectation
    fixture: str | None
    # The marker named them itself: they win over the command line and the ini file (pytest-timeout's order).
    timeout_given: bool = False
    repeat_given: bool = False

    def effective_timeout(self, session_timeout: float | None) -> float:
        return self.timeout if self.timeout_given or session_timeout is None else session_timeout

    def effective_repeat(self, session_repeat: int | None) -> dict[str, int]:
        return self.repeat if self.repeat_given or session_repeat is None else {"*": session_repeat}


def opts_out(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """``@pytest.mark.lifeguard(False)``: the test runs in this process even under --lifeguard."""
    return len(args) == 1 and args[0] is False and not kwargs



def parse_marker(args: Sequence[Any], kwargs: Mapping[str, Any], test: str,
                 python_version: tuple[int, int]) -> MarkerOptions:
    """Check every keyword of the marker; errors say "KEYWORD from marker on TEST: ..."."""
    if args:
        raise MarkerError(f"marker on {test}: takes keywords only ({', '.join(MARKER_KEYWORDS)}), or a lone False "
                          f"(not guarded by --lifeguard), got {args!r}")
    unknown = sorted(set(kwargs) - set(MARKER_KEYWORDS))
    if unknown:
        raise MarkerError(f"marker on {test}: unknown keyword {unknown[0]!r} "
                          f"(choose from {', '.join(MARKER_KEYWORDS)})")

    def source(keyword: str) -> str:
        return f"{keyword} from marker on {test}"

    try:
        timeout = positive_seconds(kwargs.get("timeout", DEFAULT_TIMEOUT), source("timeout"))
    except ValueError as exc:
        raise MarkerError(str(exc)) from None
    fixture = kwargs.get("fixture")
    if fixture is not None and (not isinstance(fixture, str) or not fixture.isidentifier()):
        raise MarkerError(f"{source('fixture')}: {fixture!r} is not a fixture name "
                                  "(a folder of fixtures_native/)")
    expect = kwargs.get("expect", "passed")
    per_variant = isinstance(expect, Mapping) and bool(expect) and all(
        key in (*VARIANTS, DEFAULT_VARIANT) for key in expect)
    variants = _variants(kwargs.get("variant"), fixture, expect if per_variant else None, source("variant"))
    if per_variant:
        missing = [v for v in variants if v not in expect]
        if missing:
            raise MarkerError(f"{source('expect')}: no expectation for variant {missing[0]!r}")
        by_variant = {v: expect[v] for v in variants}
    else:
        by_variant = {v: expect for v in variants}
    for spec in by_variant.values():
        if not isinstance(spec, (str, Mapping)):
            raise MarkerError(f"{source('expect')}: {spec!r} is not an outcome such as 'passed' "
                                      "or 'crashed@exit'")
        try:
            resolve_expectation(spec, python_version, source("expect"))
        except ValueError as exc:
            raise MarkerError(str(exc)) from None
    repeat = kwargs.get("repeat", 1)
    try:
        if isinstance(repeat, Mapping):
            repeats = {str(v): positive_count(n, source("repeat")) for v, n in repeat.items()}
            stray = [v for v in repeats if v not in variants]
            if stray:
                raise ValueError(f"{source('repeat')}: names variant {stray[0]!r}, which does not run")
        else:
            repeats = {"*": positive_count(repeat, source("repeat"))}
    except ValueError as exc:
        raise MarkerError(str(exc)) from None
    return MarkerOptions(timeout=timeout, repeat=repeats, expect=by_variant, fixture=fixture,
                         timeout_given="timeout" in kwargs, repeat_given="repeat" in kwargs)



def _variants(variant: Any, fixture: str | None, per_variant: Mapping[str, Any] | None,
              source: str) -> tuple[str, ...]:
    if variant is None:
        if fixture is None:
            if per_variant is not None and set(per_variant) != {DEFAULT_VARIANT}:
                raise MarkerError(f"{source}: buggy/fixed variants need fixture=")
            return (DEFAULT_VARIANT,)
        if per_variant is not None:
            return tuple(v for v in VARIANTS if v in per_variant) or VARIANTS
        return VARIANTS
    chosen = (variant,) if isinstance(variant, str) else tuple(variant) if isinstance(variant, (list, tuple)) else None
    if not chosen or any(v not in VARIANTS for v in chosen):
        raise MarkerError(f"{source}: {variant!r} is not 'buggy', 'fixed' or a tuple of them")
    if fixture is None:
        raise MarkerError(f"{source}: a variant needs fixture= (the native fixture it is a build of)")
    return tuple(dict.fromkeys(chosen))


def is_plain_body(function: Any) -> bool:
    """A plain function, which a fresh interpreter can call: not async, not a generator."""
    import inspect

    return inspect.isfunction(function) and not (inspect.iscoroutinefunction(function)
                                                 or inspect.isasyncgenfunction(function)
                                                 or inspect.isgeneratorfunction(function))


def label_of(item: pytest.Item) -> str:
    """``test_x[1]`` or ``TestA::test_x``: the nodeid without its file."""
    return item.nodeid.partition("::")[2] or item.name
