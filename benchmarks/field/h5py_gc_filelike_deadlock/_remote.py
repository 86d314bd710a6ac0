"""A tiny "remote" file-like object whose I/O runs on a service thread, as fsspec's does.

Shared by bug.py and passing.py. fsspec (s3fs, gcsfs, ...) serves every read of a file
object on one IO thread ("fsspecIO", an asyncio loop) and the calling thread waits for the
result; here the IO thread takes requests from a queue. Its request handling allocates, so
a garbage collection can run on it: the first request runs one explicitly (gc.collect()),
which makes the collection happen on the IO thread every time.
"""

import gc
import io
import queue
import threading

import h5py
import numpy as np


def make_hdf5_bytes() -> bytes:
    """The bytes of a small HDF5 file with one dataset (the "object in the bucket")."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f["temperature"] = np.arange(1000, dtype="f8")
    return buf.getvalue()


class IOThread:
    """The service thread: runs read requests for RemoteFile objects, one at a time."""

    def __init__(self, collect_on_first_request: bool) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.collect = collect_on_first_request
        self.thread = threading.Thread(target=self.loop, name="fsspecIO", daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while True:
            item = self.requests.get()
            if item is None:
                return
            func, done, box = item
            if self.collect:
                self.collect = False
                gc.collect()  # the request's allocations trigger a collection on this thread
            box.append(func())
            done.set()

    def call(self, func):
        """Run func on the IO thread and wait for its result (fsspec.asyn.sync)."""
        done = threading.Event()
        box: list = []
        self.requests.put((func, done, box))
        done.wait()
        return box[0]

    def stop(self) -> None:
        self.requests.put(None)
        self.thread.join(timeout=10)


class RemoteFile(io.RawIOBase):
    """A read-only file-like object whose reads are served by the IO thread."""

    def __init__(self, data: bytes, io_thread: IOThread) -> None:
        self._data = data
        self._pos = 0
        self._io = io_thread

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._data)}[whence]
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b) -> int:
        def fetch() -> bytes:  # the "range request", on the IO thread
            return self._data[self._pos:self._pos + len(b)]

        chunk = self._io.call(fetch)
        b[:len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)
