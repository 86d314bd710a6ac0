"""A Tcl interpreter caught in a reference cycle is collected by gc on a worker thread: abort.

Upstream: python/cpython#83274 (bpo-39093, "tkinter objects garbage collected from
non-tkinter thread cause crash"; fixed by python/cpython#152323, which makes
Tkapp_Dealloc skip Tcl_DeleteInterp on the wrong thread and warn instead; no release
installable here has it). A tkinter app object keeps its Tcl interpreter (a _tkinter
tkapp) and a bound method of itself, a cycle that only the cyclic gc frees. The gc runs on
whichever thread happens to trigger a collection, here a worker thread. Tkapp_Dealloc then
calls Tcl_DeleteInterp on that thread; Tcl's async handlers belong to the thread that
created the interpreter, so Tcl_AsyncDelete panics: "Tcl_AsyncDelete: async handler
deleted by the wrong thread", then abort() (SIGABRT) on the worker thread, during the run.
"""

import gc
import threading
import tkinter


class Console:
    """A small Tcl-driven app: the interpreter plus a Tcl command bound to a method of self."""

    def __init__(self) -> None:
        self.interp = tkinter.Tcl()  # a tkapp whose Tcl interpreter belongs to this thread
        self.on_line = self.handle  # bound method of self: Console <-> method cycle
        self.interp.eval("set greeting hello")

    def handle(self, line: str) -> str:
        return self.interp.eval(f"string toupper {{{line}}}")


def main() -> None:
    console = Console()
    assert console.on_line("ok") == "OK"
    gc.disable()  # so no collection on this thread frees the cycle first
    del console  # unreachable now, but the cycle keeps the tkapp alive until a gc pass
    collected = threading.Event()

    def worker() -> None:
        # A background thread that collects (a periodic gc.collect(), or one triggered by
        # its own allocations): the Console cycle, and its Tcl interpreter, die here.
        gc.collect()
        collected.set()

    thread = threading.Thread(target=worker, name="collector")
    thread.start()
    thread.join(timeout=30)
    # Not reached: Tcl aborts the process from inside the worker's gc.collect().
    print("collected on the worker:", collected.is_set())


main()
