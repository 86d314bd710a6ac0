"""The same program as bug.py, with the fixed greenlet 3.5.0 (python-greenlet/greenlet#508).

setup.sh installs greenlet 3.5.0, which has no atexit callback, into fixed-greenlet-3.5.0/
inside the case's venv; it goes first on sys.path here, so gevent 26.4.0 runs on it and
greenlet stays usable while every atexit handler runs: the shipper's flush switches to the
hub and back, and the process exits 0. (greenlet's own workaround for 3.4.0: import greenlet
before registering the exit handler.)
"""

import os
import sys

FIXED = os.path.join(sys.prefix, "fixed-greenlet-3.5.0")
if not os.path.isdir(os.path.join(FIXED, "greenlet")):
    raise RuntimeError(f"run setup.sh first: {FIXED} has no greenlet 3.5.0")
sys.path.insert(0, FIXED)

import _shipper  # noqa: E402
from gevent import monkey  # noqa: E402

monkey.patch_all()

import time  # noqa: E402

import greenlet  # noqa: E402

for step in range(3):
    time.sleep(0.001)
    _shipper.record(f"step {step} done")
print(f"work done on greenlet {greenlet.__version__}; the shipper flushes at exit", flush=True)
