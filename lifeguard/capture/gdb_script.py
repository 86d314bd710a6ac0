"""Runs INSIDE gdb's embedded Python (``source``d by lifeguard.capture.gdb), never imported.

It walks every thread of the attached process or loaded core and prints one JSON
record per line, each behind a marker, so the supervisor parses data rather than
``bt`` text, and keeps every thread finished before a timeout kill:

    LIFEGUARD-TARGET {...}    what was attached / loaded, GIL state, signal
    LIFEGUARD-THREAD {...}    one thread: lwp, pthread handle, frames innermost first
    LIFEGUARD-NOTE {...}      a non-fatal problem (python-gdb failed, stack cut short)
    LIFEGUARD-ERROR {...}     capture failed (attach refused, no such process, bad core)
    LIFEGUARD-DONE {}

gdb's Python is not the target's Python and may be older (3.6+): only the
standard library, nothing from lifeguard.
"""

import importlib.util
import json
import re
import sys

import gdb

MARKER = "LIFEGUARD-"
MAX_NATIVE_FRAMES = 512  # a runaway recursion must not make the dump endless
MAX_PYTHON_FRAMES_PER_EVAL = 1024
EVAL_FRAME = "_PyEval_EvalFrameDefault"

# The GIL's state, per CPython layout: 3.10/3.11 keep it in the runtime, 3.12+
# per interpreter (behind a pointer). The first expression that evaluates wins.
GIL_EXPRESSIONS = [
    "_PyRuntime.interpreters.main->ceval.gil",
    "&_PyRuntime.ceval.gil",
]


def emit(kind, payload):
    sys.stdout.write(f"{MARKER}{kind} {json.dumps(payload)}\n")
    gdb.flush()


def note(message):
    emit("NOTE", {"message": message})


def load_python_gdb(path):
    """Load CPython's python-gdb extension as a module of its own; None on failure."""
    try:
        spec = importlib.util.spec_from_file_location("lifeguard_python_gdb", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as error:  # any failure only costs the Python frames
        note(f"python-gdb extension {path} failed to load: {error}")
        return None
    if not hasattr(module, "Frame"):
        note(f"python-gdb extension {path} has no Frame class")
        return None
    return module


def read_atomic(value):
    """Integer value of a field that may be a _Py_atomic_* struct (<=3.12) or a plain scalar (3.13)."""
    try:
        if value.type.strip_typedefs().code == gdb.TYPE_CODE_STRUCT:
            value = value["_value"]
        return int(value)
    except gdb.error:
        return None


def gil_state():
    """(locked, pthread handle of the last holder) or (None, None) when symbols do not allow it."""
    for expression in GIL_EXPRESSIONS:
        try:
            gil = gdb.parse_and_eval(expression).dereference()
            locked = read_atomic(gil["locked"])
            holder_address = read_atomic(gil["last_holder"])
        except (gdb.error, RuntimeError):
            continue
        if locked is None or holder_address is None:
            continue
        holder = None
        if locked and holder_address:
            try:
                tstate_type = gdb.lookup_type("PyThreadState").pointer()
                tstate = gdb.Value(holder_address).cast(tstate_type)
                holder = int(tstate["thread_id"])
            except (gdb.error, RuntimeError):
                holder = None
        return bool(locked), holder
    return None, None


def thread_handle(thread):
    try:
        handle = thread.handle()
    except (gdb.error, RuntimeError, AttributeError):
        return None
    if not handle:
        return None
    return int.from_bytes(bytes(handle), sys.byteorder)


# The thread's own PyThreadState, per CPython version, without calling into the process (python-gdb's own
# lookup may call pthread_getspecific in it): attached (3.12+), then the gilstate key's slot (x86-64 glibc).
THREAD_STATE_EXPRESSIONS = [
    "_Py_tss_gilstate",
    "_Py_tss_tstate",
    "((struct pthread*)$fs_base)->specific_1stblock[_PyRuntime.autoTSSkey._key].data",
]


def follows_thread_chain(libpython):
    """Whether this python-gdb walks a thread's frame chain from its thread state (3.12+'s py-bt does)."""
    return hasattr(libpython, "PyFramePtr") and hasattr(libpython.PyFramePtr, "get_thread_local_frame")


def older_frame(pyop):
    try:
        return pyop.previous()
    except Exception:  # the chain's end may hold no readable frame
        return None


def thread_local_frame(libpython):
    """The selected thread's newest interpreter frame, from its thread state, or None."""
    for expression in THREAD_STATE_EXPRESSIONS:
        try:
            tstate = gdb.parse_and_eval(f"(PyThreadState*)({expression})")
            if int(tstate) == 0:
                continue
            current = tstate["current_frame"]
            return libpython.PyFramePtr(current) if int(current) else None
        except (gdb.error, RuntimeError):
            continue
    return None


def python_frames(libpython, gdb_frame, cursor, follow):
    """Python frames run by one _PyEval_EvalFrameDefault frame, innermost first, and the interpreter frame
    the next (older) eval frame starts at.

    A build without a frame pointer in the eval loop leaves its ``frame`` variable optimized out: its frames
    then continue the thread's chain (``cursor``, from the thread state at the first such eval frame), as
    python-gdb's own py-bt does where it can (``follow``).
    """
    frames = []
    pyop = libpython.Frame(gdb_frame).get_pyop()
    if pyop is None or pyop.is_optimized_out():
        pyop = cursor
    # 3.10: one PyFrameObject per eval frame. 3.11: _PyInterpreterFrame chain, the
    # eval frame's own part ends at the frame marked is_entry. 3.12+: it ends
    # before the "shim" frame the eval loop pushed on entry.
    for _ in range(MAX_PYTHON_FRAMES_PER_EVAL):
        if pyop is None or pyop.is_optimized_out():
            return frames, None
        if hasattr(pyop, "is_shim") and pyop.is_shim():
            return frames, older_frame(pyop) if follow else None
        if getattr(pyop, "_is_code", True):
            frames.append(
                {
                    "function": pyop.co_name.proxyval(set()),
                    "file": pyop.filename(),
                    "line": pyop.current_line_num(),
                    "is_python": True,
                }
            )
        if not hasattr(pyop, "previous"):
            return frames, None
        if hasattr(pyop, "is_entry") and pyop.is_entry():
            return frames, older_frame(pyop) if follow else None
        pyop = pyop.previous()
    return frames, None


def native_frame(frame):
    record = {"function": None, "file": None, "line": None, "library": None, "address": None}
    try:
        record["function"] = frame.name()
    except gdb.error:
        pass
    try:
        pc = frame.pc()
        record["address"] = hex(pc)
        record["library"] = gdb.solib_name(pc)
    except gdb.error:
        pass
    try:
        sal = frame.find_sal()
        if sal.symtab is not None:
            record["file"] = sal.symtab.filename
            record["line"] = sal.line or None
    except gdb.error:
        pass
    try:
        record["inline"] = frame.type() == gdb.INLINE_FRAME
    except gdb.error:
        record["inline"] = False
    return record


def walk_thread(thread, libpython, notes):
    thread.switch()
    frames = []
    python_failures = 0
    cursor = None  # the next eval frame's interpreter frame, where its own variable is optimized out
    follow = libpython is not None and follows_thread_chain(libpython)
    cursor_read = not follow
    eval_frames = python_count = 0
    try:
        frame = gdb.newest_frame()
    except gdb.error as error:
        notes.append(f"thread {thread.ptid[1]}: no frames: {error}")
        return frames
    while frame is not None and len(frames) < MAX_NATIVE_FRAMES:
        record = native_frame(frame)
        if libpython is not None and record["function"] == EVAL_FRAME and not record["inline"]:
            eval_frames += 1
            try:
                if not cursor_read:
                    cursor, cursor_read = thread_local_frame(libpython), True
                found, cursor = python_frames(libpython, frame, cursor, follow)
                frames.extend(found)
                python_count += len(found)
            except Exception as error:  # a damaged interpreter frame must not lose the native stack
                cursor = None
                python_failures += 1
                if python_failures == 1:
                    notes.append(f"thread {thread.ptid[1]}: Python frames unreadable: {error}")
        frames.append(record)
        try:
            frame = frame.older()
        except gdb.error as error:
            notes.append(f"thread {thread.ptid[1]}: backtrace stopped: {error}")
            break
    if frame is not None and len(frames) >= MAX_NATIVE_FRAMES:
        notes.append(f"thread {thread.ptid[1]}: backtrace cut at {MAX_NATIVE_FRAMES} frames")
    if eval_frames and not python_count and not python_failures:
        notes.append(f"thread {thread.ptid[1]}: python-gdb read no Python frame of its {eval_frames} eval "
                     f"frame(s)")
    return frames


def signal_info(core_output):
    """What killed the process of a core: $_siginfo when readable, else gdb's banner line."""
    info = {}
    match = re.search(r"Program (?:terminated with|received) signal (SIG\w+)", core_output)
    if match:
        info["name"] = match.group(1)
    try:
        siginfo = gdb.parse_and_eval("$_siginfo")
        info["number"] = int(siginfo["si_signo"])
        info["code"] = int(siginfo["si_code"])
        if info["number"] in (4, 7, 8, 11):  # SIGILL SIGBUS SIGFPE SIGSEGV carry a fault address
            info["address"] = hex(int(siginfo["_sifields"]["_sigfault"]["si_addr"]))
    except (gdb.error, RuntimeError):
        pass
    if "name" not in info and "number" in info:
        import signal

        try:
            info["name"] = signal.Signals(info["number"]).name
        except ValueError:
            pass
    try:
        info["tid"] = gdb.selected_thread().ptid[1]
    except (gdb.error, AttributeError):
        pass
    return info or None


def dump_threads(libpython, target):
    inferior = gdb.selected_inferior()
    threads = sorted(inferior.threads(), key=lambda t: t.num)
    if not threads:
        emit("ERROR", {"message": "no threads: the process is gone or the core is empty"})
        return
    locked, holder = gil_state()
    target["pid"] = inferior.pid
    target["gil_locked"] = locked
    target["gil_holder"] = holder
    emit("TARGET", target)
    for thread in threads:
        notes = []
        frames = walk_thread(thread, libpython, notes)
        emit(
            "THREAD",
            {
                "tid": thread.ptid[1] or thread.ptid[0],
                "num": thread.num,
                "name": thread.name,
                "handle": thread_handle(thread),
                "frames": frames,
            },
        )
        for message in notes:
            note(message)


def capture_live(pid, python_gdb):
    target = {"pid": pid, "mode": "live"}
    # Loaded before attaching: the target stays stopped only while threads are walked.
    libpython = load_python_gdb(python_gdb) if python_gdb else None
    target["python_gdb"] = libpython is not None
    try:
        gdb.execute(f"attach {int(pid)}", to_string=True)
    except gdb.error as error:
        # "ptrace: Operation not permitted.", "ptrace: No such process." ...
        emit("ERROR", {"message": f"attach failed: {str(error).strip()}"})
        return
    try:
        dump_threads(libpython, target)
    finally:
        try:
            gdb.execute("detach", to_string=True)
        except gdb.error as error:
            note(f"detach failed: {error}")
    emit("DONE", {})


def capture_core(core_path, python_gdb):
    target = {"core": core_path, "mode": "core"}
    try:
        loaded = gdb.execute(f"core-file {core_path}", to_string=True)
    except gdb.error as error:
        emit("ERROR", {"message": f"core file unreadable: {str(error).strip()}"})
        return
    target["signal"] = signal_info(loaded)
    try:
        # The kernel's psargs note: the command line, cut at 80 bytes.
        match = re.search(r"^exe = '(.*)'$", gdb.execute("info proc", to_string=True), re.M)
        if match:
            target["psargs"] = match.group(1)
    except gdb.error:
        pass
    libpython = load_python_gdb(python_gdb) if python_gdb else None
    target["python_gdb"] = libpython is not None
    dump_threads(libpython, target)
    emit("DONE", {})


def capture_replay(python_gdb, run_arguments):
    """Run the program gdb was given (--args) until it stops on a signal, then dump it.

    The crash is caught where it happens, before any handler runs: the way to get
    native stacks when the kernel pipes core files to a handler lifeguard cannot read.
    """
    target = {"mode": "replay"}
    libpython = load_python_gdb(python_gdb) if python_gdb else None
    target["python_gdb"] = libpython is not None
    try:
        # The arguments and redirections, already quoted for the shell gdb starts the program with.
        output = gdb.execute(f"run {run_arguments}", to_string=True)
    except gdb.error as error:
        emit("ERROR", {"message": f"replay could not start: {str(error).strip()}"})
        return
    if not gdb.selected_inferior().pid:
        lines = [line for line in output.splitlines() if line.strip()]
        emit("ERROR", {"message": "the replayed run did not stop on a signal: " + (lines[-1] if lines else "")})
        emit("DONE", {})
        return
    target["signal"] = signal_info(output)
    dump_threads(libpython, target)
    try:
        gdb.execute("kill", to_string=True)
    except gdb.error as error:
        note(f"kill failed: {error}")
    emit("DONE", {})
