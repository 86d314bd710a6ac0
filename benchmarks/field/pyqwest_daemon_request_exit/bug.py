"""A pyqwest SyncClient request in flight on a daemon thread when the interpreter exits: a crash.

Upstream: curioswitch/pyqwest#164 ("SyncClient crashes the process (SIGABRT/SIGSEGV) when a
daemon thread has a request in flight at interpreter exit", pyqwest 0.4.1 to 0.6.0, Linux/glibc,
Python 3.11). A SyncClient call releases the GIL while its tokio runtime does the request; when
the request ends after the interpreter has started finalizing, the daemon thread comes back
into pyqwest's Rust code (SyncHttpTransport::do_execute), which drops its Python-side objects
without a valid thread state: "Fatal Python error: PyThreadState_Get: the function must be
called with the GIL held" and SIGABRT (SIGSEGV in some runs of the report).

The report's reproducer races 24 daemon threads against the exit; here one daemon thread
sends one request to a local endpoint that never answers, the main thread waits until the
request is received (handshake), and the connection is dropped while the interpreter
finalizes (by the destructor of a module-level object, which runs at module teardown), so the
request fails, and the daemon thread re-enters pyqwest, exactly then.
"""

import sys
import threading
import time

import pyqwest
from _status import StatusServer


class DropConnectionAtExit:
    """At module teardown, with the interpreter finalizing, close the connection under the request."""

    def __init__(self, conn):
        self.conn, self.sleep, self.write = conn, time.sleep, sys.stderr.write

    def __del__(self):
        self.write("interpreter finalizing: the server drops the connection\n")
        self.conn.close()  # the in-flight request fails now; its daemon thread returns into pyqwest
        self.sleep(2)  # a bound, not a handshake: the crash comes within milliseconds
        self.write("no crash within 2 s\n")


server = StatusServer()
client = pyqwest.SyncClient()
# the target is the bound method itself, so the thread keeps no frame of this module alive
threading.Thread(target=client.get, args=(server.url,), kwargs={"timeout": 30.0}, daemon=True).start()
holder = DropConnectionAtExit(server.wait_for_request())
print("main thread done; the request is still in flight on the daemon thread", flush=True)
