"""Pillow: an image, a resize, an encode to PNG in memory, a point callback."""

from typing import Any

MODULES = ("PIL.Image",)


def hook(module: Any) -> list[Any]:
    import io

    image = module.new("RGB", (64, 64), (10, 20, 30))
    out = io.BytesIO()
    image.resize((128, 128)).save(out, format="PNG")
    return [image, image.point(lambda v: 255 - v), out.getvalue()]
