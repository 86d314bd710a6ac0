"""psutil: this process, its threads and memory, the CPU counters (read-only calls only)."""

from typing import Any

MODULES = ("psutil",)


def hook(module: Any) -> list[Any]:
    me = module.Process()
    return [me, me.memory_info(), me.threads(), module.cpu_times(), module.virtual_memory()]
