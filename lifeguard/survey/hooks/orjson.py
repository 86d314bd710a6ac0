"""orjson: encode with a default callback, decode."""

from typing import Any

MODULES = ("orjson",)


def hook(module: Any) -> list[Any]:
    data = module.dumps({"a": [1, 2.5, "x"], "when": object()}, default=repr)
    return [data, module.loads(data)]
