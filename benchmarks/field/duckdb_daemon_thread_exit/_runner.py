"""A background query runner: a daemon thread runs one long DuckDB query until interrupted.

Shared by bug.py and passing.py; they differ only in *when* close() runs.
"""

import sys
import threading
import time

import duckdb

# Long enough never to finish by itself (bounded all the same: close() interrupts it).
LONG_QUERY = "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b"


def _run(conn: "duckdb.DuckDBPyConnection", started: threading.Event, stopped: threading.Event) -> None:
    """The daemon worker: DuckDB executes the query in C++ with the GIL released."""
    started.set()
    try:
        conn.execute(LONG_QUERY).fetchall()  # <- the line the owner waits to see this thread on
    except duckdb.InterruptException:
        pass
    stopped.set()  # acknowledge the shutdown


class QueryRunner:
    """Owns a connection and the daemon thread running a query on it; close() interrupts it."""

    def __init__(self) -> None:
        self.conn = duckdb.connect()
        self.conn.execute("SET threads TO 2")
        started = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=_run, args=(self.conn, started, self.stopped), name="query", daemon=True
        )
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError("handshake broke: the query thread did not start")
        self._wait_until_running()

    def _wait_until_running(self) -> None:
        """Handshake: return once the worker's frame sits on the conn.execute(...) line.

        The main thread can only look while it holds the GIL, i.e. after the worker gave it
        up: on that line, that means inside DuckDB's execute (GIL released). The short
        settle sleep covers the few instructions between reaching the line and the call.
        """
        code = _run.__code__
        lines = open(code.co_filename, encoding="utf-8").read().splitlines()
        target_line = next(
            number
            for number in range(code.co_firstlineno, len(lines) + 1)
            if lines[number - 1].strip().startswith("conn.execute(LONG_QUERY)")
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(self.thread.ident)
            if frame is not None and frame.f_code is code and frame.f_lineno == target_line:
                time.sleep(0.2)
                return
            time.sleep(0.01)
        raise RuntimeError("handshake broke: the query thread never entered execute")

    def close(self, timeout: float = 5.0) -> None:
        """Interrupt the running query and wait (bounded) for the worker to acknowledge."""
        if not self.stopped.is_set():
            self.conn.interrupt()
        self.stopped.wait(timeout)
        self.thread.join(timeout)

    def __del__(self) -> None:
        self.close()
