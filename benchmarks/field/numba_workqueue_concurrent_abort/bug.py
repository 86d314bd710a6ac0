"""Two Python threads call a numba parallel=True kernel at once: numba's workqueue aborts.

Upstream: numba/numba#8563 ("workqueue threading layer 'safety' mechanism aliases nesting
and concurrent access", the abort's reason; the message was reworded by numba/numba#8566),
as users hit it in numba/numba#9288 ("Python abort on any call of guvectorize with
parallel=True with multithreading"). The workqueue threading layer is not thread-safe: its
parallel_for (numba/np/ufunc/workqueue.c) counts running launches in a process-wide
global and, when a second launch comes while one runs, prints
"Numba workqueue threading layer is terminating: Concurrent access has been detected."
and raises SIGABRT, killing the process from inside the library.

Here a background thread runs a long kernel (nogil=True, one prange region) and the main
thread, once the worker is inside the region, calls the same kernel on its own data.
"""

import threading

from _kernels import DATA, row_energy, start_worker, warm_up

print(f"threading layer: {warm_up()}", flush=True)
worker = start_worker(threading.Lock())  # a lock private to the worker: no serialization
print("worker inside its parallel region; the main thread launches one too", flush=True)
row_energy(DATA[:8], 10)  # second concurrent parallel_for -> workqueue abort (SIGABRT)
worker.join()
print("not reached")
