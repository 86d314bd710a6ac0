"""pyarrow: a table, a compute kernel on its thread pool, IPC to memory."""

from typing import Any

MODULES = ("pyarrow",)


def hook(module: Any) -> list[Any]:
    import pyarrow.compute as pc

    table = module.table({"a": list(range(1000)), "b": [str(i) for i in range(1000)]})
    sink = module.BufferOutputStream()
    with module.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return [table, pc.sum(table["a"]), table.sort_by("b"), sink.getvalue()]
