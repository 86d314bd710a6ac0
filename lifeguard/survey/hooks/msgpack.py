"""msgpack: pack with a default callback, stream-unpack with an object hook."""

from typing import Any

MODULES = ("msgpack",)


def hook(module: Any) -> list[Any]:
    packer = module.Packer(default=repr)
    data = packer.pack({"a": [1, 2.5, "x", b"y"], "when": object()})
    unpacker = module.Unpacker(object_hook=lambda d: dict(d), raw=False)
    unpacker.feed(data)
    return [packer, unpacker, list(unpacker), module.unpackb(data, object_hook=dict)]
