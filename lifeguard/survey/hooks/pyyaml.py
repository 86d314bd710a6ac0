"""PyYAML (its libyaml binding, yaml._yaml): the C loader and dumper with a custom constructor."""

from typing import Any

MODULES = ("yaml",)


def hook(module: Any) -> list[Any]:
    loader = getattr(module, "CSafeLoader", module.SafeLoader)
    dumper = getattr(module, "CSafeDumper", module.SafeDumper)
    text = module.dump({"a": [1, 2.5, "x"]}, Dumper=dumper)
    return [module.load(text, Loader=loader), text]
