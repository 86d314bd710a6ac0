"""pyFFTW runs a 2-thread FFT in the parent, the process forks, the child runs it again: the child hangs.

Upstream: pyFFTW/pyFFTW#135 ("Process hangs when pyfftw used within a multiprocessing
process": fftn with threads=2 in the parent, then in multiprocessing's forked workers; no
hang with threads=1; open). pyFFTW's wheels bundle FFTW 3 built with its OpenMP threads
(libfftw3_omp) and their own GNU libgomp. The parent's threaded FFT runs FFTW's
fftw_spawn_loop in an OpenMP parallel region, which starts libgomp's worker pool. GNU
OpenMP does not survive fork: the child inherits the pool's bookkeeping but not its
threads, so the child's threaded FFT waits at the end of its parallel region
(gomp_team_end -> gomp_team_barrier_wait_end) for workers that do not exist. The parent
only waits for the child.
"""

import os
import sys

import numpy as np
from pyfftw.interfaces import numpy_fft

X = np.random.default_rng(0).standard_normal((512, 512))


def threads() -> int:
    """The native threads of this process, libgomp's workers included (Linux)."""
    return len(os.listdir("/proc/self/task"))


expected = np.fft.fftn(X)
assert np.allclose(numpy_fft.fftn(X, threads=2), expected)  # FFTW's OpenMP pool now exists
assert threads() > 1, "FFTW's OpenMP workers did not start"
pid = os.fork()
if pid == 0:
    numpy_fft.fftn(X, threads=2)  # hangs in libgomp's barrier: the workers stayed in the parent
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
