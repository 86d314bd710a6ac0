"""Wait until descriptors can be read, whatever their numbers.

``select.select`` refuses any descriptor numbered 1024 or above (FD_SETSIZE): in a pytest process whose tests
hold many files open, the pidfd of a forked test gets such a number, and every wait on it raised ValueError.
poll has no such limit.

Standard library only: the child side uses it too.
"""

from __future__ import annotations

import select

_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR


def readable(fds: list[int], timeout: float | None) -> list[int]:
    """Those of ``fds`` that are readable (or at end of file, or in error) within ``timeout`` seconds (None:
    without end), in the order given; [] when the time is up."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, _READABLE)
    wait = None
    if timeout is not None:  # poll counts in milliseconds
        wait = max(0, int(timeout * 1000))
        if wait < timeout * 1000:  # rounded up: a wait of 0.4 ms is 1 ms, not a look that never waits
            wait += 1
    events = poller.poll(wait)
    ready = {fd for fd, _ in events}
    return [fd for fd in fds if fd in ready]
