"""A small prefetcher: a daemon thread blocks in torch's Future.wait until the owner closes it.

Shared by bug.py and passing.py; they differ only in *when* close() runs.
"""

import inspect
import sys
import threading
import time

import torch


def _consume(
    pending: "torch.futures.Future", started: threading.Event, stopped: threading.Event
) -> None:
    """The daemon worker: waits for the next batch in torch.futures.Future.wait.

    The binding of Future.wait runs under pybind11's call_guard<gil_scoped_release>: the
    thread sits in C++ with the GIL released, and takes the GIL back in the destructor of
    the gil_scoped_release guard when the future completes.
    """
    started.set()
    pending.wait()  # <- the line the owner waits to see this thread on
    stopped.set()  # acknowledge the shutdown


class Prefetcher:
    """Owns a torch Future and the daemon thread waiting on it; close() completes and joins."""

    def __init__(self) -> None:
        self.pending = torch.futures.Future()
        started = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=_consume,
            args=(self.pending, started, self.stopped),
            name="prefetch",
            daemon=True,
        )
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError("handshake broke: the prefetch thread did not start")
        self._wait_until_blocked()

    def _wait_until_blocked(self) -> None:
        """Handshake: return once the worker is inside the C++ of torch._C.Future.wait.

        The worker's innermost Python frame is torch.futures.Future.wait, on the line that
        calls the C++ binding, called from the pending.wait() line of _consume. The main
        thread can only look while it holds the GIL, i.e. after the worker gave it up: on
        that line, that means inside the binding (GIL released). The short settle sleep
        covers the few instructions between reaching the line and the call.
        """
        lines, first = inspect.getsourcelines(_consume)
        consume_line = first + next(
            i for i, line in enumerate(lines) if line.strip().startswith("pending.wait()")
        )
        wait_code = torch.futures.Future.wait.__code__
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(self.thread.ident)
            caller = frame.f_back if frame is not None else None
            if (
                frame is not None
                and frame.f_code is wait_code
                and caller is not None
                and caller.f_code is _consume.__code__
                and caller.f_lineno == consume_line
            ):
                time.sleep(0.1)
                return
            time.sleep(0.01)
        raise RuntimeError("handshake broke: the prefetch thread never blocked in Future.wait")

    def close(self, timeout: float = 5.0) -> None:
        """Complete the pending future (wakes the worker) and wait for its acknowledgement.

        Bounded: a worker that never acknowledges (bug.py: it is being killed) is given up
        on after `timeout` seconds.
        """
        if not self.pending.done():
            self.pending.set_result(None)
        self.stopped.wait(timeout)
        self.thread.join(timeout)

    def __del__(self) -> None:
        # Like torch.utils.data.DataLoader's iterator: shut the worker down when collected.
        self.close()
