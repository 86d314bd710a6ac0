"""pyarrow imported for the first time inside an atexit handler: SIGSEGV after Py_Finalize.

Upstream: apache/arrow#38626 ("[Python] Segmentation fault when pyarrow is imported in exit
handler", pyarrow 13/14; fixed in pyarrow 15.0.0; pandas-dev/pandas#55866 is the same crash
through pandas). Importing pyarrow registers Python-backed extension types in libarrow's
C++ ExtensionTypeRegistry, a static, and registers an atexit callback that unregisters them
while Python is alive. Imported from an atexit handler, that callback is registered too late
to run, so the registry still owns the arrow::py::PyExtensionType objects when exit() runs
libarrow's static destructors after Py_Finalize: ~ExtensionTypeRegistryImpl ->
~PyExtensionType -> PyGILState_Ensure on a finalized interpreter -> SIGSEGV in
PyThreadState_New (interp NULL), on the main thread, after the interpreter is gone (exit).
No message: the process just dies.

Here the program records a few steps and registers an exit handler that saves them as an
Arrow IPC file, importing pyarrow lazily there, the way "exit handlers in a complex codebase
might incidentally import pyarrow, especially via pandas" (the reporter).
"""

from _report import run

run()
print("work done; the exit handler will import pyarrow and save the summary", flush=True)
