"""A lazily created Tcl interpreter is first needed on a worker thread, freed at exit: abort.

Upstream: python/cpython#83274 (bpo-39093, "tkinter objects garbage collected from
non-tkinter thread cause crash"; fixed by python/cpython#152323, which makes
Tkapp_Dealloc skip Tcl_DeleteInterp on the wrong thread and warn instead; no release
installable here has it) and python/cpython#113770. A module keeps one Tcl interpreter
(a _tkinter tkapp) as a lazily created singleton; the first caller happens to be a worker
thread, so the interpreter belongs to that thread. The worker finishes, the singleton
stays. At interpreter exit the module teardown frees it on the main thread: Tkapp_Dealloc
calls Tcl_DeleteInterp there, and Tcl panics because the interpreter's async handler
belongs to the worker: "Tcl_AsyncDelete: async handler deleted by the wrong thread", then
abort() (SIGABRT) on the main thread, during finalization.
"""

import threading
import tkinter

_interp = None


def evaluator() -> tkinter.Tcl:
    """The shared Tcl evaluator, created by whichever thread asks first."""
    global _interp
    if _interp is None:
        _interp = tkinter.Tcl()
    return _interp


def render(results: list) -> None:
    """A task on a worker thread: the first user of the evaluator, so it creates it here."""
    results.append(evaluator().eval("format %05.1f 3.14159"))


def main() -> None:
    results: list = []
    worker = threading.Thread(target=render, args=(results,), name="renderer")
    worker.start()
    worker.join(timeout=30)
    if results != ["003.1"]:
        raise RuntimeError(f"the renderer thread did not finish: {results!r}")
    print("rendered on the worker:", results[0], "- exiting with the evaluator alive")


main()
# At exit: the module's teardown drops _interp on the main thread, not its creator.
