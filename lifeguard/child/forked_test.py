"""The child half of a test forked from the pytest process (``pytest --lifeguard``, fork mode).

Runs only in the forked child, never in the supervisor: ``lifeguard.run.fork_here`` forks the pytest (or
pytest-xdist worker) process after the test's fixtures are set up, and the child comes here. It becomes the
run's process (its cgroup first, its own session, output to the run's relays, the result channel, the dump
signal), calls the test body, then ends through the interpreter's own exit, never ``os._exit``: ``Py_Exit``
runs the program's non-daemon thread joins, the atexit callbacks, ``Py_FinalizeEx`` (module finalization,
the last garbage collection) and then C ``exit()``, which runs the C++ static destructors. That is where the
lifetime bugs this tool exists for happen (a static destructor releasing a Python object after
``Py_Finalize``: the onnxruntime incident).

Finalizing a copy of the whole pytest process would cost ~50-100 ms a test, nearly all of it copy-on-write
faults while pytest's own objects are freed. So the child freezes the heap it inherits for the garbage
collector as it starts (``gc.freeze``), and takes the modules that were loaded before the test session
began (pytest, its plugins, lifeguard: ``harness_modules``) out of ``sys.modules``: finalization then finalizes
what the tests imported (the test modules, the extensions under test, what they loaded) as a process running
them would, and leaves the harness's objects alone. The modules the exit itself runs on (threading, os, io,
warnings, ...: ``ALWAYS_KEPT``) stay until the test's atexit callbacks and lifeguard's last one have run (they may
import them); only then are they taken out too (``_drop_core``; the harness's callbacks registered before the
session still follow): clearing their dictionaries cost every test about 210 copy-on-write faults and frees
nothing of the test's. ``sys``, ``builtins``, ``__main__`` and the import system (``FINALIZED``) are finalized
as always.

Standard library and ``lifeguard.child`` only.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from lifeguard.child import bootstrap, cores, crash_park, emit, joined, protocol, unpatched
from lifeguard.child import watchdog as child_watchdog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, NoReturn

# Exit code of a child that could not become the run's process (its cgroup refused it): never a test's.
SETUP_FAILED = 70
# Modules every interpreter needs to finalize itself, and resource, which the cores step imports as
# finalization starts (taken out, it would be imported again from disk by every forked test); never taken out
# of sys.modules.
ALWAYS_KEPT = frozenset({"sys", "builtins", "__main__", "_thread", "threading", "atexit", "_io", "io", "abc",
                         "_abc", "codecs", "_codecs", "encodings", "_signal", "signal", "faulthandler", "gc",
                         "resource", "_weakref", "weakref", "_warnings", "warnings", "posix", "os", "time", "ctypes",
                         "_ctypes", "marshal", "zipimport", "_frozen_importlib", "_frozen_importlib_external",
                         "_imp"})

# The modules a forked test's finalization still clears: the interpreter's own and the import system's.
FINALIZED = frozenset({"sys", "builtins", "__main__", "_frozen_importlib", "_frozen_importlib_external", "_imp",
                       "zipimport", "marshal"})

_harness: list[tuple[str, ...]] = []
# The modules of ALWAYS_KEPT's packages the pytest process had loaded (os.path, encodings.utf_8, ctypes._endian)
# but FINALIZED: taken out with ALWAYS_KEPT, after the atexit callbacks.
_core: list[tuple[str, ...]] = []
_harness_packages: set[str] = set()  # their top-level packages but the standard library's
_dropped: list[object] = []  # the harness's modules, kept alive in the child: never freed, never finalized
# The path finders of the pytest process's import system as it last forked (see hold_path_finders).
_finders: list[object] = []
# Every atexit callback registered in the pytest process since the session began: (function, args, kwargs).
_registered: list[tuple[Callable[..., object], tuple[Any, ...], dict[str, Any]]] = []


def snapshot_harness() -> None:
    """Called in the pytest process as it is configured: the modules loaded now belong to the harness (see
    snapshot_harness_modules), and the atexit callbacks registered from now on are recorded (see
    _atexit_as_a_test_process)."""
    snapshot_harness_modules()
    _record_atexit()


def snapshot_harness_modules() -> None:
    """The modules loaded now belong to the harness. Called again as the session starts, before collection:
    what the plugins imported as they were configured after lifeguard (pytest's debugging plugin loads pdb,
    sysconfig and its build-time data dictionary) is the harness's too, not finalized in every forked test."""
    names = tuple(sys.modules)
    _harness[:] = [tuple(name for name in names
                         if name not in ALWAYS_KEPT and name.partition(".")[0] not in ALWAYS_KEPT)]
    _core[:] = [tuple(name for name in names if name.partition(".")[0] in ALWAYS_KEPT and name not in FINALIZED)]
    stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    _harness_packages.clear()
    _harness_packages.update({name.partition(".")[0] for name in _harness[0]} - stdlib - {"__main__"})


@contextlib.contextmanager
def harness_imports() -> Iterator[None]:
    """Around lifeguard's own work in the pytest process after the snapshot (the session record made at the
    first guarded test: pytest's tmp folder asks getpass for the user's name, the interpreter's description
    reads sysconfig): what it imports is the harness's too."""
    before = set(sys.modules)
    try:
        yield
    finally:
        if _harness:
            _harness[0] += tuple(name for name in tuple(sys.modules) if name not in before
                                 and name.partition(".")[0] not in ALWAYS_KEPT)


def _record_atexit() -> None:
    import atexit

    if getattr(atexit.register, "_lifeguard_recording", False):  # a second session in this process
        return
    register, unregister = atexit.register, atexit.unregister

    def recording_register(func: Callable[..., object], /, *args: Any, **kwargs: Any) -> Callable[..., object]:
        _registered.append((func, args, kwargs))
        return register(func, *args, **kwargs)

    def recording_unregister(func: Callable[..., object], /) -> None:
        _registered[:] = [entry for entry in _registered if entry[0] != func]
        unregister(func)

    recording_register.__doc__, recording_unregister.__doc__ = register.__doc__, unregister.__doc__
    recording_register._lifeguard_recording = True  # type: ignore[attr-defined]
    atexit.register, atexit.unregister = recording_register, recording_unregister  # type: ignore[assignment]


def _owner(func: object) -> str:
    """The top-level package of the module that defined a callback (a partial's function's)."""
    while hasattr(func, "func"):  # functools.partial
        func = func.func
    module = getattr(func, "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) else ""


def _atexit_as_a_test_process(entries: list[tuple[Callable[..., object], tuple[Any, ...], dict[str, Any]]],
                              unregister: Callable[[Callable[..., object]], None],
                              register: Callable[..., object]) -> None:
    """In the child, after lifeguard's own last callback is registered: the atexit callbacks the session
    registered in the pytest process (``entries``, as recorded there; never the child's own, such as
    lifeguard's last callback) are the test process's as a process running the tests alone would have them.
    Those of the harness's third-party packages (pytest's cleanup of its temporary folders, which would run in every
    forked test and race the session; its plugins'; lifeguard's engine's) are dropped; the rest (the test
    modules', the extensions under test's, the standard library's) are registered again after lifeguard's,
    so they run before it, as they would in that process, and a crash in one is seen inside the atexit
    phase. Callbacks registered before the session began are the harness's and stay as they were."""
    if not entries:
        return
    for func, _, _ in entries:
        unregister(func)
    _registered.clear()
    for func, args, kwargs in entries:
        if _owner(func) not in _harness_packages:
            register(func, *args, **kwargs)


def hold_path_finders() -> None:
    """In the pytest process, before each fork: the path finders its imports made (``sys.path_importer_cache``,
    each with a listing of its folder) are referenced here too, so a forked test's finalization leaves them
    alone. That cache is freed late in finalization (the copy of ``sys``'s dictionary the interpreter keeps
    holds it), and freeing the harness's finders cost every forked test about 1.5 ms of copy-on-write faults
    on the file names of site-packages and the standard library. The finders the test's own imports add are
    freed as in any process. Renewed only when the cache changed size: a finder a fork did not see is freed
    in that child, as it would be anyway."""
    cache = sys.path_importer_cache
    if len(cache) != len(_finders):
        _finders[:] = list(cache.values())


def become_run(join: str, fds: tuple[int, int, int], env: dict[str, str], spec: protocol.ChildSpec,
               body: Callable[[], int], *, own_streams: bool = False,
               watchdog: tuple[int, str] | None = None, collector: bool = True,
               sigchld_ignored: bool = False) -> NoReturn:
    """In the forked child: become the run, call ``body`` (its return value is the exit code), then exit as
    a process does. Never returns into the pytest code that forked it, whatever happens. ``own_streams``:
    sys.stdout and sys.stderr write to the run's relays too (see _own_output). ``watchdog``: the watchdog's
    pipe (its write end, the supervisor's) and the run's id: the child registers itself there as its own
    session's leader, then closes it (while a copy is open, the watchdog cannot see the supervisor die, and
    this child would outlive it). ``collector``: the garbage collector was enabled in the pytest process
    (which forked with it disabled: see below). ``sigchld_ignored``: the session ignores SIGCHLD (the pytest
    process stopped ignoring it across the fork, to keep this child's exit status): so does the test."""
    # First of all: the inherited heap is frozen for the garbage collector, so the child's collections (its
    # final one included) neither walk it nor write to it, and it pays for its own objects only. Frozen here,
    # not in the parent before the fork: the pytest process's own collections go on as in plain pytest (a
    # freeze there, undone after the fork, left every young object of the session in the oldest generation).
    # The parent forked with the collector off, so no collection ran before this (at-fork handlers allocate).
    gc.freeze()
    if collector:
        gc.enable()
    if sigchld_ignored:
        import signal

        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    code = SETUP_FAILED
    try:
        events_fd, out_fd, err_fd = fds
        if join:  # before anything of the test's can fork: nothing may start outside the run's cgroup
            try:
                with open(join, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as exc:
                os.write(err_fd, f"lifeguard: the run could not join its cgroup {join}: {exc}\n".encode())
                os._exit(SETUP_FAILED)
        joined.own_process_group()  # a terminal's Ctrl-C reaches pytest, which kills the run's tree itself
        if os.isatty(0):  # pytest -s: a read of the terminal in a background group fails, never stops the test
            import signal

            signal.signal(signal.SIGTTIN, signal.SIG_IGN)
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        if watchdog is not None:
            _register_with(*watchdog)
        _own_output(out_fd, err_fd, own_streams)
        if spec.get("cores"):
            crash_park.install()  # the test works in pytest's folder: a crash in it waits to be read
        else:  # nobody reads this run's stacks: a crash must not wait parked as the keeper's worker has it
            crash_park.remove()
        # Set one by one: os.environ.update's generic mapping code (an ABC instance check that fills the ABC's
        # cache) cost every forked test about 50 copy-on-write faults, more than the variables themselves.
        environ = os.environ
        for name, value in env.items():
            environ[name] = value
        environ[protocol.EVENTS_FD_ENV] = str(events_fd)
        run_dir = str(spec["run_dir"])
        import atexit
        import threading

        session_callbacks = list(_registered)  # the pytest process's, before the child registers its own
        # Registered before lifeguard's last callback (install_evidence's), so it runs just after it.
        atexit.register(_drop_core)
        bootstrap.install_evidence(run_dir, spec["dump_signal"], spec.get("seed") or 0,
                                   list(spec.get("perturbations") or []))
        _atexit_as_a_test_process(session_callbacks, atexit.unregister, atexit.register)

        emit(protocol.STARTED, python=list(sys.version_info[:3]), main_thread=threading.get_ident())
        # The test works in pytest's folder: no core may land there until finalization moves it to the run's.
        cores.at_finalization(run_dir, cores=bool(spec.get("cores")), body_end=False)
        emit(protocol.BODY_START)
        code = body()
        emit(protocol.BODY_END, exit=str(code))
        _drop_harness(_harness[0] if _harness else ())
    except BaseException:  # lifeguard's own code failed in the child: say so, and never return into pytest
        try:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(SETUP_FAILED)
    _exit_as_a_process(code)


def _register_with(watchdog_fd: int, run_id: str) -> None:
    """Tell the watchdog of this run before anything of the test's runs, then close our copy of its pipe.
    The supervisor tells it too, after the fork, but a supervisor killed before it got there (descheduled
    on a loaded machine while the test already ran) left the test running for ever: the watchdog saw the
    end of its pipe with no run registered. Until this write, the copy held here keeps that end away."""
    try:
        line = child_watchdog.run_line(os.getpid(), run_id) + "\n"
        os.write(watchdog_fd, line.encode(errors="surrogateescape"))  # one line: one atomic write
    except OSError:
        pass  # the watchdog is gone: the supervisor still kills the run itself
    finally:
        unpatched.close(watchdog_fd)


def _own_output(out_fd: int, err_fd: int, own_streams: bool) -> None:
    """Descriptors 1 and 2 become the run's relays: what native code, faulthandler and a fatal error write
    there is the run's evidence. sys.stdout and sys.stderr stay what pytest made them for the test (its
    capture, which writes into pytest's own temporary files and shows the output with the test as usual, or
    capsys); with ``own_streams`` (pytest's ``--capture=sys``, whose buffers would die with the child) they
    write to the relays as well."""
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    unpatched.close(out_fd)
    unpatched.close(err_fd)
    import faulthandler

    if own_streams:
        import io

        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True,
                                      errors="backslashreplace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True,
                                      errors="backslashreplace")
    # The process's stdin is nothing: a forked test never reads pytest's terminal. sys.stdin stays what pytest
    # made it (under capture, its guard that fails a test reading stdin, as in plain pytest); a new text
    # stream on os.devnull cost every forked test 0.13 ms (48 copy-on-write faults of the io machinery).
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    unpatched.close(null)
    faulthandler.enable(file=2, all_threads=True)  # pytest's own handler writes to its terminal


def _drop_harness(names: Iterable[str]) -> None:
    """Take the harness's modules out of sys.modules, so finalization leaves them alone (see the module's
    docstring); what the tests imported stays and is finalized. Each stays referenced: freeing one here would
    cost what finalizing it would."""
    modules = sys.modules
    for name in names:
        module = modules.pop(name, None)
        if module is not None:
            _dropped.append(module)


def _drop_core() -> None:
    """Just after lifeguard's last atexit callback: the modules the exit ran on, and those of their packages
    that the pytest process had, leave sys.modules too (see the module's docstring), but for ``FINALIZED``."""
    _drop_harness(_core[0] if _core else [name for name in ALWAYS_KEPT - FINALIZED if name in sys.modules])


def _exit_as_a_process(code: int) -> NoReturn:
    import ctypes

    # Py_Exit: threading._shutdown, atexit, Py_FinalizeEx, then exit(code): C atexit and static destructors.
    exit_process = ctypes.pythonapi.Py_Exit
    exit_process.argtypes = [ctypes.c_int]
    exit_process(int(code))
    os._exit(code)  # not reached
