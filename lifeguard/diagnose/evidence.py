"""The view of a run that rules read, and the Finding they produce."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Event, RunResult, StderrLine, ThreadRef
from lifeguard.model.stacks import ATTACH_WAITING, Frame, ProcessStacks, ThreadStack, base_function

# Native functions a thread sits in while it blocks (libc spellings vary by version).
WAIT_FUNCTIONS = (
    "pthread_join", "__pthread_clockjoin_ex", "__pthread_join", "___pthread_join",
    "__futex_abstimed_wait", "futex_wait", "__lll_lock_wait", "__lll_lock_wait_private",
    "pthread_cond_wait", "___pthread_cond_wait", "__pthread_cond_wait", "pthread_cond_timedwait",
    "__pthread_cond_timedwait", "___pthread_cond_timedwait", "pthread_mutex_lock", "___pthread_mutex_lock",
    "sem_wait", "__new_sem_wait_slow64", "sem_clockwait", "sem_timedwait", "do_futex_wait",
    "__GI___futex_abstimed_wait_cancelable64",
    "std::thread::join", "PyThread_acquire_lock_timed", "PyMUTEX_LOCK",
    "wait4", "__wait4", "waitpid", "__waitpid",
    "select", "__select", "poll", "__poll", "epoll_wait", "read", "__libc_read", "nanosleep",
    "__GI___clock_nanosleep", "clock_nanosleep", "__clock_nanosleep", "pause", "sleep",
)
JOIN_FUNCTIONS = ("pthread_join", "__pthread_clockjoin_ex", "__pthread_join", "___pthread_join", "std::thread::join")
FORK_FUNCTIONS = ("__libc_fork", "_Fork", "fork", "__run_fork_handlers", "__run_prefork_handlers",
                  "os_fork_impl", "os_fork", "PyOS_BeforeFork")
GIL_WAIT_FUNCTIONS = ("take_gil", "PyGILState_Ensure", "PyEval_RestoreThread", "PyEval_AcquireThread",
                      "PyEval_AcquireLock")
EXIT_HANDLER_FUNCTIONS = ("__run_exit_handlers", "__cxa_finalize", "_dl_fini", "exit", "__GI_exit")
# Native frames of a running garbage collection.
GC_FUNCTIONS = ("gc_collect_main", "gc_collect_with_callback", "gc_collect_impl", "collect", "_PyGC_Collect",
                "gc_collect_region", "_PyGC_CollectNoFail", "delete_garbage", "subtype_dealloc")
# Where a thread waits for a lock: Python's (named at the highest level that shows it), then libc's.
PYTHON_LOCK_FUNCTIONS = ("PyThread_acquire_lock_timed", "PyThread_acquire_lock", "PyMutex_LockFlags",
                         "_PyMutex_LockTimed", "_PyMutex_LockSlow")
NATIVE_LOCK_FUNCTIONS = ("pthread_mutex_lock", "___pthread_mutex_lock", "__lll_lock_wait", "__lll_lock_wait_private",
                         "sem_wait", "do_futex_wait", "__futex_abstimed_wait")


@dataclass(frozen=True)
class Evidence:
    """What the rules look at: the outcome, the events and every captured stack."""

    outcome: Outcome
    phase: Phase | None
    signal: int | None
    signal_name: str | None
    fatal_error: str | None
    stderr_tail: str
    processes: tuple[ProcessStacks, ...]
    python_stacks: dict[str, str]
    events: tuple[Event, ...]
    stderr_messages: tuple[StderrLine, ...] = ()  # library messages from the whole stderr
    oom_kills: int = 0  # the kernel's out-of-memory kills while the run lived

    @classmethod
    def of(cls, result: RunResult) -> Evidence:
        return cls(result.outcome, result.phase, result.signal, result.signal_name, result.fatal_error,
                   result.stderr_tail, result.backtraces, dict(result.python_stacks), result.events,
                   result.stderr_messages, result.oom_kills)

    @property
    def failed(self) -> bool:
        return self.outcome is not Outcome.PASSED

    def threads(self) -> list[tuple[ProcessStacks, ThreadStack]]:
        return [(p, t) for p in self.processes for t in p.threads]

    @property
    def hung_processes(self) -> tuple[ProcessStacks, ...]:
        """What the hang rules look at: every captured process of a hung run, none of any other run."""
        return self.processes if self.outcome is Outcome.HUNG else ()

    def event_kinds(self) -> set[str]:
        return {e.name for e in self.events}


def matches(function: str | None, names: tuple[str, ...]) -> bool:
    """Does a native frame's function name match one of ``names`` (ignoring libc alias prefixes)?"""
    if not function:
        return False
    bare = base_function(function.split("(")[0].strip())
    for name in names:
        if bare.lstrip("_") == name.lstrip("_"):
            return True
        if "::" in name and bare.endswith("::" + name.rsplit("::", 1)[-1]):  # a C++ member, however qualified
            return True
    return False


def is_waiting(frame: Frame) -> bool:
    """Is this native frame one a thread sits in while it blocks (a prefix of WAIT_FUNCTIONS,
    so libc's versioned spellings count)?"""
    name = base_function(frame.function or "").lstrip("_")
    return not frame.is_python and bool(name) and any(name.startswith(w.lstrip("_")) for w in WAIT_FUNCTIONS)


def first_waiting_frame(thread: ThreadStack) -> tuple[int, Frame] | None:
    return next(((i, f) for i, f in enumerate(thread.frames) if is_waiting(f)), None)


def first_frame(thread: ThreadStack, names: tuple[str, ...]) -> tuple[int, Frame] | None:
    """The innermost native frame of one of ``names``: by its name, or, where a library has no symbols (libc
    without its debug symbols), the nameless frame whose caller's call instruction names the function."""
    for position, frame in enumerate(thread.frames):
        if frame.is_python:
            continue
        if matches(frame.function, names):
            return position, frame
        if position and matches(frame.calls, names) and thread.frames[position - 1].function is None:
            return position - 1, replace(thread.frames[position - 1], function=frame.calls)
    return None


def has_frame(thread: ThreadStack, names: tuple[str, ...]) -> bool:
    return first_frame(thread, names) is not None


def thread_ref(process: ProcessStacks, thread: ThreadStack, role: str) -> ThreadRef:
    return ThreadRef(process.pid, thread.tid, thread.name, role)


def caller_outside(thread: ThreadStack, start: int, skip: tuple[str, ...] = ()) -> Frame | None:
    """The first frame after ``start`` (towards main) that is user code: not libc, not
    libstdc++, not the interpreter, not in ``skip``. Names who made a blocking call."""
    for frame in thread.frames[start + 1:]:
        if frame.is_python:
            return frame
        library = frame.library or ""
        if any(part in library for part in ("libc.so", "libc-", "libstdc++", "libpthread", "ld-linux")):
            continue
        if frame.in_interpreter or matches(frame.function, skip):
            continue
        if frame.function and (frame.function.startswith("std::") or frame.function.startswith("__")):
            continue
        return frame
    return None


# The interpreter's own call and lock machinery: never the C code that *uses* a lock.
CALL_MACHINERY = ("_PyEval_", "PyEval_", "_PyObject_", "PyObject_", "_PyFunction_", "cfunction_", "method_vectorcall",
                   "_PyVectorcall", "PyVectorcall", "vectorcall", "PyThread_acquire_lock", "acquire_timed",
                   "lock_PyThread_acquire_lock", "rlock_acquire", "PyMutex", "_PyMutex", "_PyParkingLot",
                   "_PySemaphore", "PyCFunction_", "_PyCFunction", "slot_tp_", "wrapper_call", "wrap_")


def c_caller(thread: ThreadStack, start: int) -> Frame | None:
    """The C code that made the blocking call at ``start``: the first native frame towards main that is
    not libc, not the interpreter's call or lock machinery (``_enter_buffered_busy``, ``EVP_update``), or
    None when Python called the lock directly."""
    unnamed = None  # a stripped library's own code: "?? in libfoo.so" names who waits when nothing else does
    for frame in thread.frames[start + 1:]:
        if frame.is_python:
            break
        library = frame.library or ""
        function = frame.function or ""
        if any(part in library for part in ("libc.so", "libc-", "libpthread", "ld-linux")):
            continue
        if not function:
            if unnamed is None and library and not frame.in_interpreter:
                unnamed = frame
            continue
        if unnamed is not None and frame.in_interpreter:
            break  # the library's code ends where the interpreter called it
        if function.lstrip("_").startswith(tuple(m.lstrip("_") for m in CALL_MACHINERY)):
            continue
        if matches(function, WAIT_FUNCTIONS):
            continue
        return frame
    return unnamed


def describe(frame: Frame | None) -> str:
    if frame is None:
        return "unknown code"
    text = frame.function or "??"
    if frame.file:
        text += f" ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame.line else f" ({frame.file})"
    elif frame.library:
        text += f" in {frame.library.rsplit('/', 1)[-1]}"
    return text


_PY_LINE = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


_LIBRARY_PARTS = ("/lib/python3", "<frozen ", "/lifeguard/child/bootstrap.py", "/lifeguard/child/forkserver.py")


def python_location(dump: str) -> str | None:
    """The innermost user frame (not the standard library, not lifeguard's) of the
    first thread of a faulthandler dump; the innermost frame when all are library code."""
    first_thread = re.split(r"\n(?=Thread 0x|Current thread 0x)", dump.strip())[0]
    matches = _PY_LINE.findall(first_thread)
    if not matches:
        return None
    user = [m for m in matches if not any(part in m[0] for part in _LIBRARY_PARTS)]
    file, line, function = (user or matches)[0]
    return f"{function} ({file.rsplit('/', 1)[-1]}:{line})"


# Since CPython 3.13, os.fork() holds the runtime's thread-state list lock (HEAD_LOCK)
# from PyOS_BeforeFork until fork() returns; a new thread state needs it.
RUNTIME_LOCK_FUNCTIONS = ("new_threadstate", "PyMutex_LockFlags", "_PyMutex_LockTimed", "_PyParkingLot_Park")
# Frames that show a thread was created (or is run) by the interpreter itself.
# A thread in the interpreter's finalization (the main thread, as the process exits).
FINALIZE_FUNCTIONS = ("Py_FinalizeEx", "Py_Finalize", "_Py_Finalize", "finalize_modules", "_PyRuntime_Finalize")
PYTHON_THREAD_FUNCTIONS = ("thread_run", "pythread_wrapper", "Py_RunMain", "Py_BytesMain", "pymain_main",
                           "Py_Main", "PyRun_SimpleFileExFlags")
# Entry points into the interpreter from native code.
PYTHON_ENTRY_FUNCTIONS = ("_PyEval_Vector", "_PyEval_EvalFrameDefault", "PyObject_Call", "PyObject_CallObject",
                          "PyObject_Vectorcall", "_PyObject_MakeTpCall", "PyObject_CallFunction",
                          "PyObject_CallFunctionObjArgs", "PyObject_CallNoArgs", "_PyFunction_Vectorcall",
                          "PyEval_EvalCode")


def waits_for(thread: ThreadStack) -> str | None:
    """What a thread waits for to run Python: "gil", "runtime-lock" (HEAD_LOCK), "attach" (a free-threaded
    interpreter without a GIL: a stop-the-world pause holds it off), or None."""
    waiting = "attach" if thread.gil == ATTACH_WAITING else "gil"
    if has_frame(thread, ("take_gil",)):
        return waiting
    if has_frame(thread, ("PyGILState_Ensure",)) and has_frame(thread, RUNTIME_LOCK_FUNCTIONS):
        return "runtime-lock"
    if has_frame(thread, GIL_WAIT_FUNCTIONS):
        return waiting
    return None


def in_libc(frame: Frame) -> bool:
    """A frame of libc, libpthread or the dynamic loader."""
    return any(part in (frame.library or "") for part in ("libc.so", "libc-", "libpthread", "ld-linux"))


def _is_system(frame: Frame) -> bool:
    name = frame.function or ""
    return (in_libc(frame)
            or name.startswith(("std::", "__", "_"))
            or matches(name, WAIT_FUNCTIONS))


def blocking_call(thread: ThreadStack) -> tuple[int, Frame] | None:
    """The call user code made that blocks: the outermost frame of the innermost run of
    libc / libstdc++ frames (``std::thread::join`` rather than the futex under it)."""
    found = None
    for position, frame in enumerate(thread.frames):
        if frame.is_python:
            break
        if _is_system(frame):
            found = (position, frame)
        elif found is not None:
            if found[1].function is None and frame.calls:  # a library without symbols: named by the call made
                found = (found[0], replace(found[1], function=frame.calls))
            break
    return found
