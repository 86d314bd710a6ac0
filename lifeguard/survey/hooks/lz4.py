"""lz4: frame compression and a streaming decompressor."""

from typing import Any

MODULES = ("lz4.frame",)


def hook(module: Any) -> list[Any]:
    data = module.compress(b"lifeguard " * 20000)
    decompressor = module.LZ4FrameDecompressor()
    return [data, decompressor, decompressor.decompress(data)]
