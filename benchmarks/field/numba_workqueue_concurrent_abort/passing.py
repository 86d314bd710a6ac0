"""The same two calls as bug.py, serialized by one lock shared by every caller of the kernel.

numba's advice for the workqueue layer (numba/numba#8566's message, the threading-layer
docs): never launch parallel regions from several threads at once; either switch to the
thread-safe TBB layer or serialize the calls. Here the main thread takes the same lock as
the worker, so its launch waits until the worker's region has ended. The worker's kernel
is shortened so the run stays quick; the work is otherwise the same.
"""

import threading

import _kernels
from _kernels import DATA, row_energy, start_worker, warm_up

_kernels.LONG_SWEEPS = 4000  # about half a second: the run stays short
print(f"threading layer: {warm_up()}", flush=True)
KERNEL_LOCK = threading.Lock()
worker = start_worker(KERNEL_LOCK)
with KERNEL_LOCK:  # waits for the worker's region to end
    row_energy(DATA[:8], 10)
worker.join()
print("both kernels ran, one after the other")
