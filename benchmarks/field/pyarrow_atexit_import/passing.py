"""The same lazy import in an atexit handler as bug.py, with the fixed pyarrow 15.0.0.

setup.sh installs pyarrow 15.0.0 (apache/arrow#38626's fix) into fixed-pyarrow-15.0.0/
inside the case's venv; it goes first on sys.path here, so the exit handler imports the
fixed release and the process exits cleanly after writing the summary.
"""

import os
import sys

FIXED = os.path.join(sys.prefix, "fixed-pyarrow-15.0.0")
if not os.path.isdir(os.path.join(FIXED, "pyarrow")):
    raise RuntimeError(f"run setup.sh first: {FIXED} has no pyarrow 15.0.0")
sys.path.insert(0, FIXED)

from _report import run  # noqa: E402

run()
print("work done; the exit handler will import pyarrow and save the summary", flush=True)
