"""The same app and worker-thread gc as bug.py, with the interpreter released on its own thread.

The workaround the tkinter docs and python/cpython#83274 describe: a Tcl interpreter must be
destroyed by the thread that created it. Console.close() (called on the main thread, which
created the interpreter) drops the tkapp there, so Tkapp_Dealloc and Tcl_DeleteInterp run
on the right thread; the worker's collection then frees only plain Python objects.
"""

import gc
import threading
import tkinter


class Console:
    """The same app as bug.py, plus close() to release the interpreter on its own thread."""

    def __init__(self) -> None:
        self.interp = tkinter.Tcl()
        self.on_line = self.handle
        self.interp.eval("set greeting hello")

    def handle(self, line: str) -> str:
        return self.interp.eval(f"string toupper {{{line}}}")

    def close(self) -> None:
        self.interp = None  # the tkapp's last reference: deleted here, on the creator thread


def main() -> None:
    console = Console()
    assert console.on_line("ok") == "OK"
    gc.disable()
    console.close()
    del console
    collected = threading.Event()

    def worker() -> None:
        gc.collect()  # frees the Console <-> method cycle, which no longer holds a tkapp
        collected.set()

    thread = threading.Thread(target=worker, name="collector")
    thread.start()
    thread.join(timeout=30)
    assert collected.is_set(), "the collector thread did not finish"
    print("collected on the worker:", collected.is_set())


main()
