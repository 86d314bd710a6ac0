"""A tiny request client: ask a status server for its state, give up after a timeout.

Shared by bug.py and passing.py. Nothing listens on the port, so the request stays queued
in libzmq (a REQ socket connecting over TCP keeps its message until a peer appears) and the
receive times out with zmq.Again.
"""

import socket

import zmq


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ask_status(sock: "zmq.Socket", port: int) -> bytes:
    """Send one request and wait at most 300 ms for the reply (raises zmq.Again)."""
    sock.setsockopt(zmq.RCVTIMEO, 300)
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.send(b"status?")  # queued: no peer, so libzmq keeps it for later
    return sock.recv()  # times out: zmq.error.Again
