"""ujson: encode with a default callback, decode."""

from typing import Any

MODULES = ("ujson",)


def hook(module: Any) -> list[Any]:
    text = module.dumps({"a": [1, 2.5, "x"], "n": None}, default=str)
    return [text, module.loads(text)]
