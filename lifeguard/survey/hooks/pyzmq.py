"""pyzmq: a context (its I/O thread), a pair of sockets over inproc, a message each way."""

from typing import Any

MODULES = ("zmq",)
_made = [0]  # one inproc address per call: a dropped socket's endpoint lives until its socket is closed


def hook(module: Any) -> list[Any]:
    context = module.Context.instance()
    server, client = context.socket(module.PAIR), context.socket(module.PAIR)
    _made[0] += 1
    address = f"inproc://lifeguard-{_made[0]}"
    server.bind(address)
    client.connect(address)
    client.send(b"ping")
    reply = server.recv()
    return [context, server, client, reply]
