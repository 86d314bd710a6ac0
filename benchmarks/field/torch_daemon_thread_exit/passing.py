"""The same prefetcher as bug.py, shut down by atexit while the interpreter is still whole.

The workaround pytorch/pytorch#38228 and pybind/pybind11#2215 point to: no thread may take
the GIL back after finalization began, so stop and join the daemon worker first. atexit
handlers run in Py_FinalizeEx before the runtime is marked as finalizing, so the worker
wakes, takes the GIL normally and returns; the later __del__ finds it closed.
"""

import atexit

from _prefetch import Prefetcher

PREFETCHER = Prefetcher()
atexit.register(PREFETCHER.close)  # wake and join the worker before finalization begins
print("prefetcher started; atexit closes it before finalization")
