"""The same worker rendering as bug.py, with each thread's Tcl interpreter freed by that thread.

The rule python/cpython#83274 documents: a Tcl interpreter must be deleted by the thread
that created it (and, without a Tk main loop to marshal calls, used only by it). So the
evaluator is per thread (threading.local), and the worker releases its own before it
returns: Tkapp_Dealloc and Tcl_DeleteInterp run on the creator thread, and nothing of
Tcl is left for the main thread to free at exit.
"""

import threading
import tkinter

_local = threading.local()


def evaluator() -> tkinter.Tcl:
    """This thread's Tcl evaluator, created on first use by this thread."""
    interp = getattr(_local, "interp", None)
    if interp is None:
        interp = _local.interp = tkinter.Tcl()
    return interp


def release_evaluator() -> None:
    """Drop this thread's evaluator: its last reference, deleted on its creator thread."""
    _local.interp = None


def render(results: list) -> None:
    try:
        results.append(evaluator().eval("format %05.1f 3.14159"))
    finally:
        release_evaluator()


def main() -> None:
    results: list = []
    worker = threading.Thread(target=render, args=(results,), name="renderer")
    worker.start()
    worker.join(timeout=30)
    if results != ["003.1"]:
        raise RuntimeError(f"the renderer thread did not finish: {results!r}")
    print("rendered on the worker:", results[0], "- its evaluator was freed there")


main()
