"""A run's stdout and stderr, relayed through pipes into files that never exceed their cap.

The child writes to a pipe; a thread of the supervisor reads it as the data arrives and keeps the first half
of the cap in the file (readable while the run lives) and the newest half in memory, written after the head
with a line saying how much was dropped when the run is over. So a program writing 2 GB leaves at most the cap
on disk at any moment, unlike a file the child appends to, which can only be cut down between two looks.
A plain target's output is also handed to a ``LiveOutput`` as it comes. The relay reads at once whatever
arrives, so a child is never held up by it, and a hung child's output stays readable after it is killed.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from pathlib import Path

from lifeguard.model.run import RunSpec
from lifeguard.run.live import LiveOutput

READ_CHUNK = 1 << 20
POLL_MS = 100  # how often a relay with nothing to read checks whether it was told to stop
# After the run's tree is gone every writer has closed its end: end of file follows at once. A descendant
# that escaped the kill may still hold it: then we stop reading and what it writes later is lost.
DRAIN_TIMEOUT = 2.0


class Relay:
    """One stream (``name`` "stdout" or "stderr") of one run into ``path``, keeping at most ``cap`` bytes. Its
    pipe is read by the pump of its Relays."""

    def __init__(self, path: Path, cap: int, name: str, spec: RunSpec, live: LiveOutput | None,
                 pipe: tuple[int, int] | None = None) -> None:
        self.path = path
        self.head_room = cap // 2
        self.tail_room = cap - self.head_room
        self.name = name
        self.spec = spec
        self.live = live
        self.dropped = 0
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._lock = threading.Lock()  # the file and the tail, between the pump and finish()
        # Both ends close-on-exec; the child's end is handed on explicitly (``pipe``: one made for a child
        # started before the relay, lifeguard.run.headstart).
        self.read_end, self.child_end = pipe if pipe is not None else os.pipe()
        self._file = open(path, "ab", buffering=0)
        self._written = 0

    def take(self, data: bytes) -> bool:
        """What the pump read; False once the stream is finished (nothing more is kept)."""
        with self._lock:
            if self._file.closed:
                return False
            self._keep(data)
        if self.live is not None:
            self.live.write(self.spec, self.name, data)
        return True

    def _keep(self, data: bytes) -> None:
        if self._written < self.head_room:
            part = data[: self.head_room - self._written]
            self._file.write(part)
            self._written += len(part)
            data = data[len(part):]
        if not data:
            return
        self._tail.append(data)
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= self.tail_room:
            self.dropped += len(self._tail[0])
            self._tail_size -= len(self._tail.popleft())

    def close_child_end(self) -> None:
        if self.child_end >= 0:
            os.close(self.child_end)
            self.child_end = -1

    def finish(self) -> None:
        """The stream is over (or no longer read): write the kept tail after the head."""
        with self._lock:  # a pump still alive now (its live sink blocked) finds the file closed and ends
            if self._file.closed:
                return
            tail = b"".join(self._tail)
            excess = len(tail) - self.tail_room
            if excess > 0:
                self.dropped += excess
                tail = tail[excess:]
            if self.dropped:
                self._file.write(f"\n[lifeguard: {self.dropped} bytes of output dropped here]\n".encode())
            self._file.write(tail)
            self._file.close()


# Kernel thread ids of pumps joined lately. A joined thread's task stays in /proc/self/task a moment longer
# (after 46% of joins with both cores busy): pytest_plugin.guard must not take it for a foreign thread.
_JOINED_PUMPS: deque[int] = deque(maxlen=8)


def joined_pumps() -> frozenset[int]:
    """Kernel thread ids of the pumps joined lately, whose tasks may not have exited yet."""
    return frozenset(_JOINED_PUMPS)


class Relays:
    """A run's two relays, read by one pump thread (one thread a run, not one a stream: a forked test starts
    it as its child starts, on the same two cores)."""

    def __init__(self, spec: RunSpec, stdout: Path, stderr: Path, cap: int, live: LiveOutput | None,
                 pipes: tuple[tuple[int, int], tuple[int, int]] | None = None, *, pump_now: bool = True) -> None:
        """``pump_now``: the pump starts at once; else when told (pump()), for a child
        forked from this process: a fork while it runs is a fork of a multi-threaded process, which Python
        3.12 and later warn of at every fork (a DeprecationWarning in every forked test's report, and a
        failure under ``-W error``). The pipes hold what the child writes until then."""
        self.spec = spec
        self.live = live
        self.stdout = Relay(stdout, cap, "stdout", spec, live, pipes[0] if pipes else None)
        self.stderr = Relay(stderr, cap, "stderr", spec, live, pipes[1] if pipes else None)
        self._stop = threading.Event()
        # Made when it starts: a thread object made before a fork is reset by every forked child's at-fork step.
        self._thread: threading.Thread | None = None
        self._closed = False
        if pump_now:
            self.pump()

    @property
    def child_ends(self) -> tuple[int, int]:
        return self.stdout.child_end, self.stderr.child_end

    def _pump(self) -> None:
        relays = {self.stdout.read_end: self.stdout, self.stderr.read_end: self.stderr}
        poller = select.poll()
        for fd in relays:
            poller.register(fd, select.POLLIN | select.POLLHUP)
        try:
            while relays and not self._stop.is_set():  # also while data keeps coming (a writer that escaped)
                for fd, _ in poller.poll(POLL_MS):
                    try:
                        data = os.read(fd, READ_CHUNK)
                        # End of file, the stream finished meanwhile, or its file cannot be written (a full
                        # disk): this stream is read no more.
                        going = bool(data) and relays[fd].take(data)
                    except OSError:
                        going = False
                    if not going:
                        poller.unregister(fd)
                        del relays[fd]
                        os.close(fd)
        finally:
            for fd in relays:
                os.close(fd)

    def started(self) -> None:
        """The child has its ends: ours are closed, so end of file comes when the run's last writer exits."""
        self.stdout.close_child_end()
        self.stderr.close_child_end()

    def pump(self) -> None:
        """The pump runs from now on, if it did not yet (the pipes hold what the child wrote until then)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._pump, name="lifeguard-relay", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Wait (bounded) for the end of both streams, then write each one's kept tail after its head."""
        if self._closed:
            return
        self._closed = True
        self.started()
        self.pump()
        assert self._thread is not None  # pump() made it
        self._thread.join(DRAIN_TIMEOUT)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(DRAIN_TIMEOUT)
        if self._thread.native_id is not None:
            _JOINED_PUMPS.append(self._thread.native_id)
        for relay in (self.stdout, self.stderr):
            relay.finish()
        if self.live is not None:
            self.live.close(self.spec)  # a last line without its newline
