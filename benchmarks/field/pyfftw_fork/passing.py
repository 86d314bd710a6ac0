"""The same FFTs as bug.py, with the forked child's FFT on one thread.

The workaround of pyFFTW/pyFFTW#135 (and of its users, e.g. skuschel/postpic#257): threads=1
in the processes that multiprocessing forks. A one-thread FFTW plan runs on the calling
thread and never enters OpenMP, so the child does not touch the libgomp pool it inherited
from its parent (which keeps its 2-thread FFT).
"""

import os
import sys

import numpy as np
from pyfftw.interfaces import numpy_fft

X = np.random.default_rng(0).standard_normal((512, 512))


def threads() -> int:
    """The native threads of this process (Linux)."""
    return len(os.listdir("/proc/self/task"))


expected = np.fft.fftn(X)
assert np.allclose(numpy_fft.fftn(X, threads=2), expected)
assert threads() > 1, "FFTW's OpenMP workers did not start"
pid = os.fork()
if pid == 0:
    os._exit(0 if np.allclose(numpy_fft.fftn(X, threads=1), expected) else 1)  # the fix: one thread
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
