"""tensorstore writes and reads an array, then the program starts a fork worker: tensorstore aborts.

Upstream: google/tensorstore#217 ("SIGABRT on 0.1.72 when using subprocess"), #221 ("New
fork detection incompatible with tqdm"; the same abort hit PyTorch DataLoader workers and
orbax users). tensorstore runs its I/O on internal thread pools, and a forked child of a
process whose pools run can hang on a lock or a pool that stayed in the parent (#206,
"Possible deadlock in tensorstore"). So 0.1.72 installs, when its thread pools start, a
pthread_atfork *prepare* handler, LogFatalOnFork, which prints "aborting: fork() is not
allowed since tensorstore uses internal threading" and calls abort(). A prepare handler runs
in the process that calls fork(), before the child exists: the main thread dies of SIGABRT
inside os.fork() (multiprocessing's Popen for a 'fork' Process), and no child is ever made.
0.1.73 relaxed the check (google/tensorstore commit f2a81b6).
"""

import multiprocessing
import sys

from _store import child_work, write_and_read

if __name__ == "__main__":
    assert write_and_read() == 65536.0  # tensorstore's thread pools (and its fork handler) are set up
    worker = multiprocessing.get_context("fork").Process(target=child_work)
    worker.start()  # os.fork() -> LogFatalOnFork -> abort() in this process
    worker.join()
    sys.exit(worker.exitcode)
