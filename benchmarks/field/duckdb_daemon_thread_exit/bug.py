"""A daemon thread's DuckDB query ends during interpreter finalization: std::terminate.

Upstream: duckdb/duckdb#13904 ("Process gets aborted during interpreter shutdown when a
duckdb connection is present in a child thread", open; reported on duckdb 1.1.0, which
this case pins). DuckDBPyConnection::Execute runs the query under pybind11's
gil_scoped_release; when the query ends (here: interrupted, as a shutdown does) the
guard's destructor (implicitly noexcept) takes the GIL back with PyEval_RestoreThread.
A daemon thread that does so after Py_FinalizeEx marked the runtime as finalizing is
ended by CPython (3.8 to 3.13) with PyThread_exit_thread -> pthread_exit; its forced
unwinding cannot pass the noexcept destructor, so libstdc++ calls std::terminate:
"terminate called without an active exception", SIGABRT on the daemon thread, at exit.

Here a module-level QueryRunner (a daemon thread inside conn.execute) is shut down by its
__del__, which runs during finalization (the __main__ module's teardown): close() calls
conn.interrupt() and waits for the worker, which aborts taking the GIL back.
"""

from _runner import QueryRunner

RUNNER = QueryRunner()  # the worker now runs the query in DuckDB's C++, GIL released
print("query running; exiting with the worker still inside conn.execute")
# End of script: Py_FinalizeEx sets "finalizing", then tears down __main__, whose
# RUNNER.__del__ interrupts the query: the worker aborts taking the GIL back.
