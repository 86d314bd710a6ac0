"""A tiny telemetry shipper: buffers lines and flushes them from an atexit handler.

Shared by bug.py and passing.py. It is imported (and registers its exit handler) before the
application monkey-patches the standard library with gevent, as a logging or metrics
library imported early does; its flush waits with time.sleep between retries, which after
gevent's monkey.patch_all() is gevent.sleep, a switch to gevent's hub greenlet.
"""

import atexit
import time

BUFFER: list[str] = []


def record(line: str) -> None:
    BUFFER.append(line)


def flush() -> None:
    """At exit: send what is buffered, backing off a little first (gevent.sleep once patched)."""
    print(f"shipper: flushing {len(BUFFER)} lines at exit", flush=True)
    time.sleep(0.02)  # let the last send drain; a greenlet switch under gevent
    BUFFER.clear()
    print("shipper: flushed", flush=True)


atexit.register(flush)  # registered before greenlet is imported: runs after greenlet's own callback
