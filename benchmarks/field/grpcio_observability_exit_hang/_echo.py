"""An in-process gRPC echo service, shared by bug.py and passing.py (no generated code: raw bytes)."""

from concurrent import futures

import grpc

METHOD = "/echo.Echo/Say"


def _say(request: bytes, context: grpc.ServicerContext) -> bytes:
    return b"echo: " + request


def call_echo(message: bytes) -> bytes:
    """Start a server on a free local port, make one unary call through a channel, stop both."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    handler = grpc.method_handlers_generic_handler(
        "echo.Echo", {"Say": grpc.unary_unary_rpc_method_handler(_say)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            return channel.unary_unary(METHOD)(message, timeout=10)
    finally:
        server.stop(None).wait()
