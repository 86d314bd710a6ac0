"""A status endpoint that never answers, shared by bug.py and passing.py.

`StatusServer` listens on 127.0.0.1; `wait_for_request()` accepts the client's connection and
reads its request, so when it returns the request is known to be in flight (sent, no reply),
which is the handshake the programs wait on instead of a sleep.
"""

import socket


class StatusServer:
    """A listening socket that accepts one request and never replies to it."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/status"

    def wait_for_request(self) -> socket.socket:
        """Accept the client's connection and read its request line; return the open connection."""
        conn, _ = self.listener.accept()
        request = conn.recv(4096)
        line = request.split(b"\r\n")[0].decode()
        print(f"request in flight: {line}", flush=True)
        return conn
