"""An exit handler that saves a run summary as an Arrow IPC file, importing pyarrow lazily.

Shared by bug.py and passing.py (which differ only in which pyarrow they import).
"""

import atexit
import os
import tempfile

SUMMARY: dict = {"step": [], "loss": []}


def save_summary() -> None:
    """Write SUMMARY to an Arrow IPC file; pyarrow is imported only here, at exit."""
    import pyarrow as pa

    table = pa.table(SUMMARY)
    out = os.path.join(tempfile.mkdtemp(prefix="field-pyarrow-"), "summary.arrow")
    with pa.OSFile(out, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pa.memory_map(out) as source:
        back = pa.ipc.open_file(source).read_all()
    print(f"pyarrow {pa.__version__}: saved {back.num_rows} rows to {out}", flush=True)


def run() -> None:
    """The program's work: a few steps recorded for the exit handler to save."""
    atexit.register(save_summary)
    for step in range(5):
        SUMMARY["step"].append(step)
        SUMMARY["loss"].append(1.0 / (step + 1))
