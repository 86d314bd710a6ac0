"""A small QtCore app: a QObject worker polling on its own QThread, and a short main loop.

Shared by bug.py and passing.py, which differ only in whether the app stops the thread.
"""

import os
import sys
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import (  # noqa: E402
    QCoreApplication,
    QMetaObject,
    QObject,
    Qt,
    QThread,
    QTimer,
    Signal,
    Slot,
)


class Poller(QObject):
    """Lives on the worker QThread; ticks a QTimer there, as a device or status poller does."""

    ticked = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0
        self.first_tick = threading.Event()  # handshake: the thread's event loop is running
        self.stopped = threading.Event()  # handshake: the timer is stopped (on its thread)
        self.timer = None

    @Slot()
    def start(self) -> None:
        self.timer = QTimer(self)  # created on the worker thread, so it fires there
        self.timer.timeout.connect(self.poll)
        self.timer.start(10)

    @Slot()
    def stop(self) -> None:
        self.timer.stop()
        self.stopped.set()

    @Slot()
    def poll(self) -> None:
        self.ticks += 1
        self.first_tick.set()
        self.ticked.emit(self.ticks)


# The running app, like a main window held by a module-level singleton, lives as long as the
# interpreter: its objects are destroyed by PySide's own cleanup at exit, not by whichever
# frame or module dict happens to drop the last name for them.
RUNNING: list[tuple[QCoreApplication, QThread, "Poller"]] = []


def make_app() -> tuple[QCoreApplication, QThread, Poller]:
    """Start the app, the poller thread, and wait until its event loop has ticked once."""
    app = QCoreApplication(sys.argv)
    thread = QThread()
    thread.setObjectName("poller")
    poller = Poller()
    poller.moveToThread(thread)
    thread.started.connect(poller.start)
    thread.start()
    if not poller.first_tick.wait(10):
        raise RuntimeError("handshake broke: the poller thread never ticked")
    app.aboutToQuit.connect(lambda: stop_polling(poller))
    RUNNING.append((app, thread, poller))
    return app, thread, poller


def stop_polling(poller: Poller) -> None:
    """Stop the poller's timer on its own thread and wait until it is stopped.

    The app does this when it quits, so nothing of the poller is active any more; but the
    thread's event loop goes on: nothing asks the QThread to quit.
    """
    QMetaObject.invokeMethod(poller, "stop", Qt.ConnectionType.QueuedConnection)
    if not poller.stopped.wait(10):
        raise RuntimeError("handshake broke: the poller did not stop its timer")
    time.sleep(0.1)  # let the worker leave the slot and go back to waiting in its event loop


def run_main_loop(app: QCoreApplication) -> None:
    """Run the main event loop briefly, then quit, as closing the main window does."""
    QTimer.singleShot(50, app.quit)
    app.exec()
