"""A native thread enters Python while the interpreter finalizes (static-destructor-after-finalize).

A static C++ object's thread calls ``tick`` every PERIOD microseconds; exit() joins it in the object's
destructor, after Py_FinalizeEx. Exits 0 unless the race hits (then the process crashes).

    python finalize.py BUILD_DIR [PERIOD_US]
"""

import sys
import time

sys.path.insert(0, sys.argv[1])
import races  # noqa: E402

period_us = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
ticks = []
races.start_ticker(lambda: ticks.append(None), period_us)
time.sleep(0.01)
