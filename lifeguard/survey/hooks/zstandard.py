"""zstandard: multi-threaded compression (its worker threads), streaming decompression."""

from typing import Any

MODULES = ("zstandard",)


def hook(module: Any) -> list[Any]:
    compressor = module.ZstdCompressor(level=3, threads=2)
    data = compressor.compress(b"lifeguard " * 20000)
    decompressor = module.ZstdDecompressor()
    return [compressor, decompressor, decompressor.decompressobj().decompress(data)]
