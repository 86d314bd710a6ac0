"""The code that runs first inside every supervised child (never in the supervisor).

Started as ``python -X faulthandler -u -c "...; bootstrap.main()"`` (or, for a Python process of a plain
run that lifeguard did not start itself, through ``attach``), it:
- registers a faulthandler dump on ``DUMP_SIGNAL`` for all threads, into a file per
  process (forked children re-register into their own file), so the supervisor
  can ask any live process of the tree for its Python stacks;
- reports progress on the result channel (started, body-start, body-end, forked,
  atexit) so the supervisor knows the *phase* of a failure;
- records collections that run on a thread other than the main one (the
  cross-thread-gc bug class);
- turns core dumps on only where a core lands in the run's folder (child.cores);
- imports the fixture and the scenario, and runs the body (a plain target: as Python would, child.plain).

Imports stay minimal: every millisecond here is paid by every run.
"""

import _thread
import faulthandler
import os
import sys

from lifeguard.child import cores, crash_park, emit, finalization, fork_ends, joined, os_exit, protocol, unpatched

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_dump_fds: list[int] = []  # the dump files, open for the life of the process
_undo: "list[Callable[[], None]]" = []  # takes out what install_evidence put in, last first (retire)
_harness: list[object] = []  # lifeguard's modules, out of sys.modules (hide_harness) until retire clears them
_exit_begins: "list[Callable[[], None]]" = []  # what a perturbation does when the exit begins (perturb.exit_starve)


def _dump_path(run_dir: str, pid: int) -> str:
    return os.path.join(run_dir, protocol.faulthandler_file(pid))


def _register_dump(run_dir: str, signum: int) -> None:
    path = _dump_path(run_dir, os.getpid())
    try:  # the one a passed run left in this folder (protocol.SPARE_DUMP_FILE), if any: no new inode
        os.rename(os.path.join(run_dir, protocol.SPARE_DUMP_FILE), path)
    except OSError:
        pass  # none (a new folder, or another process of the run took it): a new file
    # A descriptor, not a file object: faulthandler writes to the descriptor either way, and a text stream's
    # io machinery cost every forked test's child about 40 copy-on-write faults.
    dump = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    _dump_fds.append(dump)
    faulthandler.register(signum, file=dump, all_threads=True, chain=False)


# At most this many of the parent's threads are listed in a fork's thread inventory.
MAX_INVENTORY_THREADS = 64


def _thread_inventory() -> "list[dict[str, Any]]":
    """The calling process's threads, read in the fork's prepare step: kernel names from
    /proc/self/task and, for Python threads, their names. Cheap (one small read a thread)."""
    threading = sys.modules.get("threading")  # never import it here: the scenario may not have
    python_names = {}
    if threading is not None:
        for thread in list(getattr(threading, "_active", {}).values()):
            native_id = getattr(thread, "native_id", None)
            if native_id is not None:
                python_names[native_id] = thread.name
    inventory: list[dict[str, Any]] = []
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/self/task") if t.isdigit())
    except OSError:
        return inventory
    for tid in tids[:MAX_INVENTORY_THREADS]:
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue
        inventory.append({"tid": tid, "comm": name, "python": python_names.get(tid)})
    return inventory


def _install_fork_hook(run_dir: str, signum: int) -> None:
    at_fork: dict[str, Any] = {}
    live = [True]  # emptied by retire: a hook cannot be unregistered, so it does nothing from then on

    def before() -> None:
        if not live:
            return
        # Which threads the parent had at fork: a hung child waits for them, and they do
        # not exist in it (an OpenMP team, a Rust pool, a thread holding a lock).
        at_fork["parent"] = os.getpid()
        at_fork["forking_thread"] = getattr(sys.modules.get("threading"), "get_native_id", lambda: None)()
        at_fork["threads"] = _thread_inventory()

    def after_in_child() -> None:
        if not live:
            return
        # The dump registration is inherited with the parent's file: give the
        # child a file of its own so each process's stacks stay apart.
        _register_dump(run_dir, signum)
        fork_ends.forget_inherited()
        if len(at_fork.get("threads", ())) > 1:  # the parent's other threads are not here: see crash_park
            crash_park.install_termination()
        emit(protocol.FORKED, parent=at_fork.get("parent", os.getppid()),
             forking_thread=at_fork.get("forking_thread"), parent_threads=at_fork.get("threads", []))
        at_fork.clear()

    def after_in_parent() -> None:
        if not live:
            return
        at_fork.clear()
        fork_ends.hold_newest()  # before the program can reap the child: its end stays readable

    os.register_at_fork(before=before, after_in_child=after_in_child, after_in_parent=after_in_parent)
    _undo.append(live.clear)


# At most this many extension modules are listed when the atexit callbacks are done.
MAX_EXTENSIONS = 200


def _at_exit() -> None:
    """The last atexit callback: what follows is Py_FinalizeEx. The extension modules still loaded are
    the suspects of a crash in finalization (a reference released twice)."""
    extensions = {path.rpartition("/")[2] for module in list(sys.modules.values())
                  if type(path := getattr(module, "__file__", None)) is str and path.endswith(".so")}
    for pid, code in fork_ends.abnormal_ends():
        emit(protocol.FORK_CHILD_EXIT, child=pid, status=code, by="kernel")
    try:  # threads besides this one, alive into finalization: an exit race's material (a clean series says so)
        threads = len(os.listdir("/proc/self/task")) - 1
    except OSError:
        threads = None
    emit(protocol.ATEXIT_DONE, extensions=sorted(extensions)[:MAX_EXTENSIONS], threads=threads)
    for begin in _exit_begins:  # again: threads started since the body's end, and processes without one (attached)
        begin()
    if _harness:
        _retire()


def hide_harness() -> None:
    """Take lifeguard's own modules out of ``sys.modules`` (a plain target's process, an attached one): the
    program gets its own ``import lifeguard``, and a lifeguard it runs (a test suite of a project that uses
    lifeguard) is not told it is a scenario's child (where ``@lifeguard.scenario`` does nothing). The
    modules stay alive for the hooks until the atexit callbacks are done (retire)."""
    os.environ.pop(protocol.CHILD_ENV, None)
    for name in [n for n in sys.modules if n == "lifeguard" or n.startswith("lifeguard.")]:
        _harness.append(sys.modules.pop(name))


def _retire() -> None:
    """After the last atexit callback of a process whose lifeguard is hidden: take out every hook and drop
    every object of lifeguard's, so that Py_FinalizeEx tears down the program's objects only. Finalizing
    lifeguard's modules too made the exit about a fifth longer, and a native thread racing the exit lost
    races it wins without lifeguard (benchmarks/fidelity.py). Nothing of lifeguard runs after this."""
    finalization.forget()
    while _undo:
        _undo.pop()()
    modules = list(_harness)
    _harness.clear()
    # Cleared, not just dropped: a module is a reference cycle (its functions hold its globals), which only
    # a collection would free, and the first one runs in finalization. Our own globals go last.
    own = globals()
    for module in modules:
        if module.__dict__ is not own:
            module.__dict__.clear()
    own.clear()


MAX_ATEXIT_RECORDS = 200


def _record_atexit_registrations(atexit: "Any") -> None:
    """Each atexit callback the program (or a library, also from C) registers, as an event, in order."""
    register = atexit.register
    count = [0]

    def recording_register(func: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        module = getattr(func, "__module__", None) or getattr(getattr(func, "__self__", None), "__name__", None)
        if count[0] < MAX_ATEXIT_RECORDS and not str(module).startswith("lifeguard."):  # not our own moment
            count[0] += 1
            name = getattr(func, "__qualname__", None) or type(func).__name__
            emit(protocol.ATEXIT_REGISTERED, callback=f"{module}.{name}" if module else str(name))
        return register(func, *args, **kwargs)

    recording_register.__name__ = recording_register.__qualname__ = "register"
    recording_register.__doc__ = register.__doc__
    atexit.register = recording_register

    def unrecord() -> None:
        if atexit.register is recording_register:  # not one the program put in since
            atexit.register = register

    _undo.append(unrecord)


def _thread_name(tid: int) -> str:
    """The collecting thread's Python name when it is a real thread of threading's, else the kernel's name
    (an event library's green threads share one kernel thread: their names say nothing of it)."""
    current = getattr(sys.modules.get("threading"), "current_thread", None)  # a Thread has threading
    thread = current() if current is not None else None
    if thread is not None and getattr(thread, "native_id", None) == tid:
        return str(thread.name)
    try:
        with open(f"/proc/self/task/{tid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return f"thread {tid}"


def _install_gc_watch() -> None:
    import gc

    started, freed = [0], [0]

    def on_gc(phase: str, info: "dict[str, Any]") -> None:
        # Kernel thread ids: the main thread's is the pid (also in a forked child, whose only thread is the one
        # that forked), and no monkey-patching of threading changes them.
        tid = _thread.get_native_id()
        if tid == os.getpid():
            return
        if phase == "start":  # before: a crash inside the collection still has it
            if started[0] < protocol.MAX_FOREIGN_GC_EVENTS:
                started[0] += 1
                emit(protocol.GC_FOREIGN_THREAD, thread=tid, thread_name=_thread_name(tid),
                     generation=info.get("generation"))
        elif info.get("collected") and freed[0] < protocol.MAX_FOREIGN_GC_EVENTS:  # freeing nothing ran no destructor
            freed[0] += 1
            emit(protocol.GC_FOREIGN_FREED, thread=tid, thread_name=_thread_name(tid),
                 generation=info.get("generation"), collected=info.get("collected"))

    gc.callbacks.append(on_gc)

    def unwatch() -> None:
        if on_gc in gc.callbacks:
            gc.callbacks.remove(on_gc)

    _undo.append(unwatch)


def main() -> None:
    """Entry point of a fresh child: the spec comes in the environment, as a Python
    literal written by the supervisor (cheaper to read than importing json)."""
    joined.wait_for_cgroup()
    text = os.environ.pop(protocol.SPEC_ENV)
    if text.startswith("@"):  # too long for the environment: in a file of the run's folder
        with open(text[1:], encoding="utf-8") as spec_file:
            text = spec_file.read()
    run(eval(text, {"__builtins__": {}}, {}))


PLAIN_KINDS = ("script", "code", "module")  # plain targets the bootstrap runs (a command is exec'd as is)


def install_evidence(run_dir: str, signum: int, seed: int, perturbations: list[str]) -> None:
    """What every process of a run gets: a dump file on the signal, the fork hook, the last atexit
    callback, the record of collections on other threads, the report of an os._exit call, the perturbations."""
    _register_dump(run_dir, signum)
    _install_fork_hook(run_dir, signum)
    import atexit

    # Registered first, so it runs last of all atexit callbacks.
    atexit.register(_at_exit)
    _record_atexit_registrations(atexit)
    _install_gc_watch()
    os_exit.watch()
    _undo.append(os_exit.unwatch)
    if perturbations:
        from lifeguard.child import perturb

        _exit_begins.extend(perturb.apply(perturbations, seed))


def run(spec: "protocol.ChildSpec") -> None:
    """Set up the evidence machinery, import the fixture and the scenario, run the body.

    Returns when the body returned; raises what the body raised (SystemExit included).
    """
    run_dir = spec["run_dir"]
    kind = spec["kind"]
    plain = kind in PLAIN_KINDS
    if spec.get("cores") and not plain:
        cores.allow_core_dumps()  # a scenario works in its run folder from the start
    elif spec.get("cores"):
        crash_park.install()  # a plain target's cores are off until finalization: a crash before waits to be read
    install_evidence(run_dir, spec["dump_signal"], spec.get("seed", 0), spec.get("perturbations") or [])
    # The main thread's ident from _thread: importing threading here would make every run's program one that
    # has it, with its teardown at exit (plain `python script.py` imports it only if the program does).
    emit(protocol.STARTED, python=list(sys.version_info[:3]), main_thread=_thread.get_ident())
    # At exit, every process moves into its run folder (a plain target's cores are off until then; a
    # scenario body may have left its folder), so an exit crash leaves its core there and nowhere else.
    cores.at_finalization(run_dir, cores=bool(spec.get("cores")), body_end=False)

    body: Callable[[], object]
    on_uncaught: Callable[[BaseException], None] | None = None
    if plain:
        from lifeguard.child import plain as plain_target

        body = plain_target.prepare(spec)
        on_uncaught = plain_target.report_uncaught
        hide_harness()  # last: nothing of lifeguard is imported after this
    else:
        module = None
        fixture = spec["fixture"]
        if fixture:  # first: the scenario file may import the fixture itself
            sys.path.insert(0, spec["fixture_dir"] or "")  # (a fixture always comes with its build's folder)
            __import__(fixture)  # as importlib.import_module would, without importing importlib
            module = sys.modules[fixture]
        func = _load_function(spec["path"], spec["function"], spec.get("bytecode"))
        body = (lambda: func(module)) if fixture else func
    emit(protocol.BODY_START)
    _run_body(body, on_uncaught)


def attach(spec: "protocol.AttachSpec") -> None:
    """A Python process of a plain run that lifeguard did not start (a command's Python, a program's
    Python subprocess): the same evidence machinery, from its first line (sitecustomize) to its exit.
    ``threading`` is not imported for it (milliseconds of every attached process's start-up)."""
    emit(protocol.ATTACHED, python=list(sys.version_info[:3]), main_thread=_thread.get_ident(),
         executable=sys.executable, argv=list(getattr(sys, "orig_argv", sys.argv)))
    install_evidence(spec["run_dir"], spec["dump_signal"], spec.get("seed", 0), spec.get("perturbations") or [])
    if spec.get("cores"):
        crash_park.install()
    cores.at_finalization(spec["run_dir"], cores=bool(spec.get("cores")), body_end=True)
    emit(protocol.BODY_START)


def _load_function(path: str, name: str, bytecode: "str | None" = None) -> "Any":
    module_name = "lifeguard_scenario_" + os.path.splitext(os.path.basename(path))[0]
    module = unpatched.file_module(module_name, path)
    if module is None:
        raise ImportError(f"cannot load scenario file {path}")
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    # The supervisor's compiled code, as the loader would run its own .pyc: without one (PYTHONDONTWRITEBYTECODE,
    # a read-only folder) the loader compiles the file in every run (a millisecond, and see plain.script_code).
    code = unpatched.cached_code(path, bytecode) if bytecode else None
    if code is not None:
        exec(code, module.__dict__)
    else:
        module.__spec__.loader.exec_module(module)
    return getattr(module, name)


def _run_body(body: "Callable[[], object]", on_uncaught: "Callable[[BaseException], None] | None" = None) -> None:
    try:
        body()
    except SystemExit as exc:
        emit(protocol.BODY_END, exit=str(exc.code))
        raise
    except BaseException as exc:
        emit(protocol.BODY_ERROR, error=f"{type(exc).__name__}: {exc}")
        if on_uncaught is not None and isinstance(exc, Exception):
            on_uncaught(exc)  # a plain target's traceback as Python prints it, and exit 1
        raise
    else:
        emit(protocol.BODY_END)
    finally:
        for begin in _exit_begins:
            begin()
