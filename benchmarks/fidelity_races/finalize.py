"""A native thread enters Python while the interpreter finalizes (static-destructor-after-finalize).

A static C++ object's thread calls ``tick`` every PERIOD microseconds; exit() joins it in the object's
destructor, after Py_FinalizeEx. Exits 0 unless the race hits (then the process crashes).

The main thread exits at a random phase of the ticker, as a program's exit is not tied to its thread's clock.
``aligned`` exits after exactly ten periods instead: main's wake-up and the ticker's tenth tick then come from
timers that expire together (timer slack merges them), so which of two threads woken by one interrupt runs
first decides the race, a tie-break of the scheduler that anything shifts (5 ms more CPU at start-up).

    python finalize.py BUILD_DIR [PERIOD_US [aligned]]
"""

import random
import sys
import time

sys.path.insert(0, sys.argv[1])
import races  # noqa: E402

period_us = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
aligned = sys.argv[3:4] == ["aligned"]
ticks = []
races.start_ticker(lambda: ticks.append(None), period_us)
time.sleep(10 * period_us / 1e6 if aligned else random.uniform(0.005, 0.015))
