"""numpy: arrays, a matrix product (BLAS and its thread pool), an FFT, a random generator, a ufunc callback."""

from typing import Any

MODULES = ("numpy",)


def hook(module: Any) -> list[Any]:
    a = module.arange(4096.0).reshape(64, 64)
    big = module.ones((400, 400))
    product = a @ a.T
    threaded = big @ big  # large enough for OpenBLAS to run it on its thread pool
    spectrum = module.fft.fft(a[0])
    rng = module.random.default_rng(0)
    squared = module.frompyfunc(lambda x: x * x, 1, 1)(a[:2])  # a Python callback called from a ufunc loop
    return [a, product, threaded, spectrum, rng, rng.standard_normal(128), squared]
