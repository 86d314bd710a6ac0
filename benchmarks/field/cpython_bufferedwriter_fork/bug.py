"""A thread blocked inside BufferedWriter.write while the main thread forks: the child hangs.

Upstream: python/cpython#50970 (bpo-6721, "Locks in the standard library should be
sanitized on fork"); seen in the field as ansible/ansible#79539 ("background threads
writing to stdout/stderr can cause children to deadlock if a thread in the parent holds
the internal lock on the BufferedWriter wrapper"). A BufferedWriter (Modules/_io/
bufferedio.c) holds its own PyThread lock for the whole write, with the GIL released while
the raw write blocks. Here a writer thread writes 1 MiB into a pipe nobody reads yet, so it
blocks in write(2) holding that lock; the main thread forks at that moment. The child
inherits the lock held by a thread it does not have, and its first write to the same file
object waits in PyThread_acquire_lock_timed forever. The parent then drains the pipe, so
its own writer finishes, and waits for the child: only the child is stuck.
"""

import os
import sys
import threading

from _blocked import SYS_WRITE, wait_blocked

PAYLOAD = b"x" * (1 << 20)  # far more than a pipe holds (64 KiB)
read_fd, write_fd = os.pipe()
out = os.fdopen(write_fd, "wb", buffering=1 << 16)  # a BufferedWriter over the pipe
writer_tid: list[int] = []
started = threading.Event()


def writer() -> None:
    """Write the payload: BufferedWriter takes its lock, then blocks in write(2) on the full pipe."""
    writer_tid.append(threading.get_native_id())
    started.set()
    out.write(PAYLOAD)


thread = threading.Thread(target=writer, name="pipe-writer")
thread.start()
started.wait()
wait_blocked(writer_tid[0], SYS_WRITE, write_fd)  # the writer is inside out.write, lock held
pid = os.fork()
if pid == 0:
    out.write(b"from the child")  # hangs: the buffered lock is held by a thread not in this process
    os._exit(0)
remaining = len(PAYLOAD)
while remaining:  # let the parent's writer finish, so the parent is only waiting for the child
    remaining -= len(os.read(read_fd, remaining))
thread.join()
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
