"""A zmq.Context used as a context manager, left with an open socket: the exit hangs forever.

Upstream: zeromq/pyzmq#1757 ("zmq.Context as a context manager hangs if sockets are left
open", pyzmq 23.2.0; fixed in 24.0.0, whose Context.__exit__ and __del__ call destroy()
instead of term()); the same hang as zeromq/pyzmq#102 and #1167 (a context terminated by
__del__ before its sockets are closed). In pyzmq <= 23.2.1 Context.__exit__ calls
Context.term() -> zmq_ctx_term, which, by libzmq's contract, blocks until every socket of
the context is closed and, with the default LINGER of -1, until their queued messages are
sent. Here the request times out (zmq.Again), the exception leaves the with block with the
REQ socket still open and its request queued, and __exit__'s term() never returns: the
main thread sleeps in zmq::ctx_t::terminate (GIL released), the traceback is never
printed, and the process never ends.
"""

import zmq
from _client import ask_status, free_port

port = free_port()
with zmq.Context() as ctx:  # __exit__ -> ctx.term(): waits for every socket to close
    sock = ctx.socket(zmq.REQ)
    print(f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}): asking 127.0.0.1:{port}", flush=True)
    ask_status(sock, port)  # raises zmq.Again; the socket stays open
