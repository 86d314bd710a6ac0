"""A small Qt (QtCore) app: a status poller driven by a QTimer, and a background loader thread.

Shared by bug.py and passing.py. The Poller keeps a bound method of itself (a callback
table), so dropping it leaves a reference cycle that only Python's cyclic gc frees, on
whichever thread the next collection runs.
"""

import os
import sys
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide2.QtCore import QCoreApplication, QElapsedTimer, QEventLoop, QObject, QTimer  # noqa: E402

APP = QCoreApplication(sys.argv)


class Poller(QObject):
    """Polls a status every 5 ms with a QTimer child; owned by the thread that made it (main)."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0
        self.timer = QTimer(self)  # its timer is registered with the main thread's dispatcher
        self.timer.timeout.connect(self.poll)
        self.handlers = {"tick": self.poll}  # bound method of self: Poller <-> dict cycle
        self.timer.start(5)

    def poll(self) -> None:
        self.ticks += 1


def pump(ms: int) -> None:
    """Run the main thread's event loop for about ms milliseconds."""
    clock = QElapsedTimer()
    clock.start()
    while clock.elapsed() < ms:
        APP.processEvents(QEventLoop.AllEvents, 10)


def run_loader(collect: bool) -> None:
    """A background loader thread; its allocations (here: an explicit gc.collect()) run the gc."""
    import gc

    def load() -> None:
        rows = [{"row": i} for i in range(1000)]  # some work that allocates
        if collect:
            gc.collect()  # the collection that frees the Poller cycle runs on this thread
        del rows

    thread = threading.Thread(target=load, name="loader")
    thread.start()
    thread.join(timeout=30)
