"""The same request as bug.py, with the socket closed (LINGER 0) before the context ends.

The fix pyzmq's maintainers give in zeromq/pyzmq#1757 and #102: close every socket before
the context terminates, with a finite LINGER so that a message nobody will receive is
dropped (a nested `with ctx.socket(...)` closes it first, because with blocks unwind inner
first). Then term() in Context.__exit__ returns at once and the zmq.Again is handled.
"""

import zmq
from _client import ask_status, free_port

port = free_port()
try:
    with zmq.Context() as ctx, ctx.socket(zmq.REQ) as sock:
        sock.setsockopt(zmq.LINGER, 0)  # drop the unsent request at close
        print(f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}): asking 127.0.0.1:{port}", flush=True)
        ask_status(sock, port)
except zmq.Again:
    print("no reply from the status server (timed out); socket and context closed")
