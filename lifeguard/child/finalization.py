"""The moment a Python process starts finalizing, caught without importing ``threading`` for it.

``Py_FinalizeEx`` first calls ``threading._shutdown`` (it joins the program's non-daemon threads), then the
atexit callbacks, last registered first. A process that has ``threading`` gets its ``_shutdown`` wrapped. One
that has not (a plain script's interpreter, as the attach hook finds it at start-up: importing ``threading``
there would cost every attached process milliseconds) has no thread to join at exit unless it imports
``threading`` later, so it is caught twice:

- when ``threading`` is first imported, a finder at the head of ``sys.meta_path`` lets the real finder find
  it and wraps ``_shutdown`` once the module has run (then it leaves ``sys.meta_path``);
- until then, the moment is the first atexit callback: one registered here and kept the most recent
  (``atexit.register`` registers it again after each of the program's callbacks, until ``threading`` comes).

Standard library only, and only modules every interpreter has loaded already (atexit is built in).
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


_undo: "list[Callable[[], None]]" = []  # takes out what on_start put in (forget)


class _Moment:
    """Calls ``begin`` once, as finalization starts, and ``after_join`` once the program's threads are joined."""

    def __init__(self, begin: "Callable[[], None]", after_join: "Callable[[], None]") -> None:
        self.begin = begin
        self.after_join = after_join
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            self.begin()

    def wrap_shutdown(self, threading: "Any") -> bool:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is None:
            return False

        def finalizing() -> None:
            self.start()
            try:
                shutdown()  # joins the program's non-daemon threads, which may still use relative paths
            finally:
                self.after_join()

        threading._shutdown = finalizing

        def unwrap() -> None:
            if threading._shutdown is finalizing:
                threading._shutdown = shutdown

        _undo.append(unwrap)
        return True

    def at_exit(self) -> None:
        """The first atexit callback of a process without ``threading``: nothing to join."""
        if not self.started:
            self.start()
            self.after_join()


class _ThreadingImport:
    """A meta path finder that finds nothing itself: it wraps the loader of ``threading`` as it is found."""

    def __init__(self, loaded: "Callable[[Any], None]") -> None:
        self.loaded = loaded

    def find_spec(self, name: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if name != "threading":
            return None
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):
            return spec  # a loader shared by other modules is not wrapped: the atexit callback stays the moment

        def exec_then_hook(module: "Any") -> None:
            exec_module(module)
            self.leave()  # only now: a find_spec alone (importlib.util.find_spec) loads nothing
            self.loaded(module)

        loader.exec_module = exec_then_hook  # this spec's own loader object
        return spec

    def leave(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)


def on_start(begin: "Callable[[], None]", after_join: "Callable[[], None]") -> None:
    """Call ``begin`` as this process starts finalizing, ``after_join`` once its threads are joined."""
    import atexit as atexit_module

    atexit: Any = atexit_module  # its register is replaced below, which its stub does not allow
    register = atexit.register
    moment = _Moment(begin, after_join)
    threading = sys.modules.get("threading")
    if threading is not None:
        if not moment.wrap_shutdown(threading):  # a threading without _shutdown: the last atexit callback
            register(moment.at_exit)
        return

    def register_before_us(func: "Callable[..., Any]", *args: "Any", **kwargs: "Any") -> "Any":
        registered = register(func, *args, **kwargs)
        atexit.unregister(moment.at_exit)
        register(moment.at_exit)  # the most recent again: it runs first
        return registered

    register_before_us.__name__ = register_before_us.__qualname__ = "register"
    register_before_us.__doc__ = register.__doc__

    def threading_loaded(module: "Any") -> None:
        if moment.wrap_shutdown(module):  # finalization now starts there, before any atexit callback
            if atexit.register is register_before_us:
                atexit.register = register
            atexit.unregister(moment.at_exit)

    watch = _ThreadingImport(threading_loaded)
    sys.meta_path.insert(0, watch)
    register(moment.at_exit)
    atexit.register = register_before_us

    def undo() -> None:
        watch.leave()
        if atexit.register is register_before_us:
            atexit.register = register

    _undo.append(undo)


def forget() -> None:
    """Take out what ``on_start`` put in (threading's ``_shutdown`` as it was, the import watch, atexit's
    ``register``), once finalization has started: lifeguard retires before the interpreter finalizes."""
    while _undo:
        _undo.pop()()
