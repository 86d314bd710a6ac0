"""A QObject with a running QTimer is freed by Python's gc on a worker thread: segfault later.

Upstream: AcademySoftwareFoundation/OpenCue#473 ("Intermittent crashes in CueGui", with
"QObject::killTimer: Timers cannot be stopped from another thread"; the fix,
AcademySoftwareFoundation/OpenCue#598, "Stop qtimer wrong thread segfault", runs the gc on
the GUI thread only). Qt for Python (PySide2) deletes a Python-owned QObject's C++ object in
its wrapper's dealloc, on whatever thread that runs (with PyQt5 5.15.11 the same program
does not destroy the C++ object on the worker and does not crash). A widget/poller caught in a
reference cycle is freed by the cyclic gc, and the collection can run on any thread. Here it runs on the loader thread:
~QTimer and ~QObject cannot unregister the timer from the main thread's event dispatcher
("QObject::killTimer: Timers cannot be stopped from another thread", "QObject::~QObject:
Timers cannot be stopped from another thread"), so the dispatcher keeps a timer whose
object is freed; when it fires, the main thread's event loop delivers a QTimerEvent to the
freed QTimer: SIGSEGV in QCoreApplication::notifyInternal2, during the run.
"""

import gc

from _app import Poller, pump, run_loader

poller = Poller()
pump(50)
print(f"poller ticked {poller.ticks} times; dropping it", flush=True)
gc.disable()  # so no collection on the main thread frees the cycle first (keeps it deterministic)
del poller  # unreachable, but the cycle keeps it (and its QTimer) alive until a gc pass
run_loader(collect=True)  # the loader thread's collection destroys the Poller and its QTimer
print("loader done; the main event loop runs on", flush=True)
pump(500)  # the orphaned timer fires: delivered to the freed QTimer -> SIGSEGV
print("not reached")
