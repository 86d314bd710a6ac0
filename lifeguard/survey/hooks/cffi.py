"""cffi: the C library's qsort with a Python comparison callback (kept alive, as a program keeps it), a
malloc'd buffer owned by a gc'd cdata."""

from typing import Any

MODULES = ("_cffi_backend",)
_ffi: list[Any] = []


def hook(module: Any) -> list[Any]:
    import cffi

    if not _ffi:
        ffi = cffi.FFI()
        ffi.cdef("void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));")
        _ffi.append((ffi, ffi.dlopen(None)))
    ffi, libc = _ffi[0]

    def compare(a: Any, b: Any) -> int:
        x, y = ffi.cast("int *", a)[0], ffi.cast("int *", b)[0]
        return int((x > y) - (x < y))

    callback = ffi.callback("int(const void *, const void *)", compare)
    values = ffi.new("int[]", [5, 3, 9, 1, 7])
    libc.qsort(values, 5, ffi.sizeof("int"), callback)
    buffer = ffi.gc(ffi.cast("char *", ffi.new("char[]", 64)), lambda pointer: None)
    return [callback, values, buffer]
