"""grpcio: a server with a thread pool (started, on a local port) and a channel to it (gRPC's core threads)."""

import os
from typing import Any

MODULES = ("grpc",)
_per_process: dict[int, tuple[Any, Any]] = {}  # one server per process: a forked child gets its own


def hook(module: Any) -> list[Any]:
    from concurrent import futures

    if os.getpid() not in _per_process:
        server = module.server(futures.ThreadPoolExecutor(max_workers=2))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = module.insecure_channel(f"127.0.0.1:{port}")
        _per_process[os.getpid()] = (server, channel)
    server, channel = _per_process[os.getpid()]
    return [module.insecure_channel("127.0.0.1:1"), channel]
