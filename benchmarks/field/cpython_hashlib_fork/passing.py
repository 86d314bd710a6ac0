"""The same hashing thread / fork / child update as bug.py, made fork-safe with register_at_fork.

The fix pattern of python/cpython#50970: no thread may be inside the object's critical
section at fork. A lock taken around every update and held across fork
(os.register_at_fork before=acquire, after_in_parent/after_in_child=release) makes the
fork wait until the hashing thread has left update(), so the child inherits the hash
object's lock free and its update goes through.
"""

import hashlib
import os
import sys
import threading

from _hashing import cpu_seconds, wait_cpu

BIG = bytes(256 << 20)  # smaller than bug.py's: here fork waits for the whole update
digest = hashlib.sha512()
digest_lock = threading.Lock()  # held by every user of digest, and by fork
os.register_at_fork(
    before=digest_lock.acquire,
    after_in_parent=digest_lock.release,
    after_in_child=digest_lock.release,
)
hasher_tid: list[int] = []
hasher_cpu: list[float] = []
started = threading.Event()


def hasher() -> None:
    """Hash the big buffer under digest_lock."""
    tid = threading.get_native_id()
    hasher_tid.append(tid)
    hasher_cpu.append(cpu_seconds(tid))
    started.set()
    with digest_lock:
        digest.update(BIG)


thread = threading.Thread(target=hasher, name="hasher")
thread.start()
started.wait()
wait_cpu(hasher_tid[0], hasher_cpu[0])  # the same moment bug.py forks at
pid = os.fork()  # waits in the before-hook until the update is done
if pid == 0:
    with digest_lock:
        digest.update(b"from the child" * 1000)
    os._exit(0)
thread.join()
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
