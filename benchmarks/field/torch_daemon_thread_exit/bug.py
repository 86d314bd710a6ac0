"""A daemon thread in torch's Future.wait wakes during interpreter finalization: std::terminate.

Upstream: pytorch/pytorch#38228 ("pybind11::gil_scoped_release: crash on exit with daemon
threads", open) and pybind/pybind11#2215. torch's bindings run long C++ calls under
pybind11::gil_scoped_release; the guard's destructor (implicitly noexcept) takes the GIL
back with PyEval_RestoreThread. A daemon thread that does so after Py_FinalizeEx marked the
runtime as finalizing is ended by CPython (3.8 to 3.13) with PyThread_exit_thread ->
pthread_exit, whose forced unwinding cannot pass the noexcept destructor: libstdc++ calls
std::terminate, "terminate called without an active exception", SIGABRT on the daemon
thread, at exit.

Here a module-level Prefetcher (a daemon thread blocked in torch.futures.Future.wait) is
shut down by its __del__, as DataLoader iterators do, which runs during finalization (the
__main__ module's teardown): close() completes the future, the worker wakes in C++, its
gil_scoped_release destructor calls PyEval_RestoreThread, and the process aborts while
close() joins it.
"""

from _prefetch import Prefetcher

PREFETCHER = Prefetcher()  # the worker now waits in Future.wait with the GIL released
print("prefetcher started; exiting with the worker still waiting")
# End of script: Py_FinalizeEx sets "finalizing", then tears down __main__, whose
# PREFETCHER.__del__ wakes the daemon worker: it aborts taking the GIL back.
