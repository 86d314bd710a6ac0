"""The same runner as bug.py, shut down by atexit while the interpreter is still whole.

The workaround duckdb/duckdb#13904 and python/cpython#87135 point to: no thread may take
the GIL back after finalization began, so interrupt and join the query thread first.
atexit handlers run in Py_FinalizeEx before the runtime is marked as finalizing, so the
interrupted query returns, the worker takes the GIL normally and ends; the later __del__
finds it closed.
"""

import atexit

from _runner import QueryRunner

RUNNER = QueryRunner()
atexit.register(RUNNER.close)  # interrupt and join the worker before finalization begins
print("query running; atexit interrupts it before finalization")
