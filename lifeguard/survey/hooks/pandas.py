"""pandas: a frame, a groupby (its Cython kernels), an apply with a Python callback."""

from typing import Any

MODULES = ("pandas",)


def hook(module: Any) -> list[Any]:
    frame = module.DataFrame({"k": [i % 7 for i in range(700)], "v": range(700)})
    return [frame, frame.groupby("k").v.sum(), frame.v.apply(lambda v: v * 2), frame.to_json()]
