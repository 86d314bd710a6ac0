"""regex: compile, match, and substitute with a callback."""

from typing import Any

MODULES = ("regex",)


def hook(module: Any) -> list[Any]:
    pattern = module.compile(r"(?P<word>\w+)\s+(?P=word)")
    return [pattern, pattern.search("the the cat"), pattern.sub(lambda m: m.group(1).upper(), "a a b b")]
