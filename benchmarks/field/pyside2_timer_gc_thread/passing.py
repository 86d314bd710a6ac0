"""The same app as bug.py, with collections run on the main (GUI) thread only.

The fix of AcademySoftwareFoundation/OpenCue#598 (after the PyQt mailing list's advice):
turn the automatic gc off and collect from a QTimer on the main thread, so a QObject caught
in a cycle is always destroyed on its own thread, where ~QObject unregisters its timers.
"""

import gc

from _app import Poller, pump, run_loader
from PySide2.QtCore import QTimer

gc.disable()  # no collection on whichever thread happens to allocate...
collector = QTimer()
collector.timeout.connect(gc.collect)  # ...but a periodic one on the GUI thread
collector.start(20)

poller = Poller()
pump(50)
print(f"poller ticked {poller.ticks} times; dropping it", flush=True)
del poller
run_loader(collect=False)  # the loader thread no longer collects
pump(200)  # the main thread's collector frees the Poller on its own thread
collector.stop()
print("poller freed on the main thread; exiting cleanly")
