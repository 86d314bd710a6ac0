"""The same array work and worker as bug.py, with the worker started by spawn.

What tensorstore's maintainers say in google/tensorstore#206 and #217: fork is not supported
once tensorstore has started its threads; start workers with 'spawn' (or 'forkserver'). A
spawned worker is a fresh interpreter, started without fork()'s atfork handlers (posix_spawn
/ vfork + exec), so tensorstore's handler does not run, and the worker opens an array of its own.
"""

import multiprocessing
import sys

from _store import child_work, write_and_read

if __name__ == "__main__":
    assert write_and_read() == 65536.0
    worker = multiprocessing.get_context("spawn").Process(target=child_work)
    worker.start()
    worker.join(60)
    sys.exit(worker.exitcode if worker.exitcode is not None else 1)
