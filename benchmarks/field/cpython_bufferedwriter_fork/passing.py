"""The same writer thread / fork / child write as bug.py, made fork-safe with os.register_at_fork.

The fix pattern of python/cpython#50970 and ansible/ansible#79539: no thread may be inside
the file object's critical section at fork. A lock taken around every write and held
across fork (register_at_fork before=acquire, after_in_parent/after_in_child=release)
makes fork wait until the writer has left BufferedWriter.write, so the child inherits the
buffered lock free. The child's write then goes through.
"""

import os
import sys
import threading

from _blocked import SYS_WRITE, wait_blocked

PAYLOAD = b"x" * (1 << 20)
read_fd, write_fd = os.pipe()
out = os.fdopen(write_fd, "wb", buffering=1 << 16)
write_lock = threading.Lock()  # held by every writer, and by fork
os.register_at_fork(
    before=write_lock.acquire,
    after_in_parent=write_lock.release,
    after_in_child=write_lock.release,
)
writer_tid: list[int] = []
started = threading.Event()


def writer() -> None:
    """Write the payload under write_lock (fork waits until it is done)."""
    writer_tid.append(threading.get_native_id())
    started.set()
    with write_lock:
        out.write(PAYLOAD)


def drain() -> None:
    """Read the payload, so the writer can finish (fork now waits for it)."""
    remaining = len(PAYLOAD)
    while remaining:
        remaining -= len(os.read(read_fd, remaining))


thread = threading.Thread(target=writer, name="pipe-writer")
thread.start()
started.wait()
wait_blocked(writer_tid[0], SYS_WRITE, write_fd)  # the same moment bug.py forks at
reader = threading.Thread(target=drain, name="pipe-reader")
reader.start()
pid = os.fork()  # blocks in the before-hook until the writer has left out.write
if pid == 0:
    with write_lock:
        out.write(b"from the child")
        out.flush()
    os._exit(0)
reader.join()
thread.join()
os.read(read_fd, 64)  # the child's bytes
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
