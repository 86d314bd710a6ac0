"""A thread hashing a big buffer while the main thread forks: the child's hash call hangs.

Upstream: python/cpython#50970 (bpo-6721, "Locks in the standard library should be
sanitized on fork"). A hashlib object (Modules/_hashopenssl.c) gets its own PyThread lock
the first time it is updated with 2 KiB or more; update() then releases the GIL and holds
that lock for the whole OpenSSL computation. Here a thread feeds a 2 GiB buffer to a
sha512 object (seconds of work) and the main thread forks while it is computing. The
child inherits the object's lock held by a thread it does not have, so its own
update() on the same object waits in PyThread_acquire_lock_timed forever. The parent's
thread finishes normally; the parent only waits for the child.
"""

import hashlib
import os
import sys
import threading

from _hashing import cpu_seconds, wait_cpu

BIG = bytes(2 << 30)  # zero pages: 2 GiB to hash, almost no memory used
digest = hashlib.sha512()
hasher_tid: list[int] = []
hasher_cpu: list[float] = []
started = threading.Event()


def hasher() -> None:
    """Hash the big buffer: update() takes the object's lock and computes without the GIL."""
    tid = threading.get_native_id()
    hasher_tid.append(tid)
    hasher_cpu.append(cpu_seconds(tid))
    started.set()
    digest.update(BIG)


thread = threading.Thread(target=hasher, name="hasher")
thread.start()
started.wait()
wait_cpu(hasher_tid[0], hasher_cpu[0])  # it is computing inside update(), the lock held
pid = os.fork()
if pid == 0:
    digest.update(b"from the child" * 1000)  # hangs: the object's lock belongs to a lost thread
    os._exit(0)
thread.join()
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
