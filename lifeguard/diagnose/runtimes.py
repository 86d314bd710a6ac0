"""Native runtimes that keep worker threads, and which do not survive fork().

A forked child has one thread: the one that forked. A thread pool, OpenMP team or async
runtime that the parent had started still believes its workers exist, and the child's
first parallel call waits for them forever (a barrier, a condition, a raw futex park).
One table entry a runtime: how to recognise its frames (shared object file name and
symbol prefixes; wheels rename vendored libraries, e.g. ``libgomp-a34b3233.so.1``, so
file names match as substrings) and what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lifeguard.diagnose.blind import blinded
from lifeguard.diagnose.evidence import matches
from lifeguard.model.stacks import Frame, ThreadStack

_START_METHOD = ("use the 'spawn' or 'forkserver' start method (multiprocessing.get_context('spawn'), "
                 "concurrent.futures.ProcessPoolExecutor(mp_context=...)) so the child starts a runtime of its own")


@dataclass(frozen=True)
class NativeRuntime:
    name: str  # as a finding says it: "the GNU OpenMP runtime (libgomp)"
    short: str  # "OpenMP" for "N OpenMP worker thread(s)"
    libraries: tuple[str, ...]  # substrings of the shared object's file name
    symbols: tuple[str, ...]  # prefixes of its function names (C++ namespaces included)
    setting: str  # the library's own way to avoid the bug, for the hint

    def owns(self, frame: Frame) -> bool:
        if frame.is_python:
            return False
        library = (frame.library or "").rsplit("/", 1)[-1]
        if library and any(part in library for part in self.libraries):
            return True
        function = (frame.function or "").lstrip("<")
        # Rust and C++ names nest (``<rayon_core::latch::LockLatch>::wait_and_reset``, ``<T as
        # rayon_core::job::Job>::execute``): a namespace counts wherever it appears.
        return bool(function) and (function.startswith(self.symbols)
                                   or any(s in function for s in self.symbols if s.endswith("::")))

    def hint(self) -> str:
        return (f"{self.name} does not survive fork(): its worker threads stay in the parent. Either "
                f"{_START_METHOD}, or {self.setting} before the fork.")


RUNTIMES: tuple[NativeRuntime, ...] = (
    NativeRuntime("the GNU OpenMP runtime (libgomp)", "OpenMP", ("libgomp",), ("gomp_", "GOMP_"),
                  "limit it to one thread in the parent (OMP_NUM_THREADS=1 in the environment before the first "
                  "import, or threadpoolctl.threadpool_limits(1))"),
    NativeRuntime("the LLVM/Intel OpenMP runtime (libomp)", "OpenMP", ("libomp", "libiomp"), ("__kmp", "__kmpc"),
                  "limit it to one thread (OMP_NUM_THREADS=1, or threadpoolctl.threadpool_limits(1))"),
    NativeRuntime("OpenBLAS's thread pool", "OpenBLAS", ("libopenblas", "libscipy_openblas"),
                  ("blas_thread_server", "exec_blas", "blas_thread_"),
                  "limit it to one thread (OPENBLAS_NUM_THREADS=1, or threadpoolctl.threadpool_limits(1))"),
    NativeRuntime("a Rust rayon thread pool", "rayon", (), ("rayon_core::", "rayon::"),
                  "turn its parallelism off (RAYON_NUM_THREADS=1; tokenizers: TOKENIZERS_PARALLELISM=false)"),
    NativeRuntime("a Rust tokio runtime", "tokio", (), ("tokio::",),
                  "create the runtime in the child, after the fork"),
    NativeRuntime("onnxruntime's thread pool", "onnxruntime", ("libonnxruntime", "onnxruntime_pybind11_state"),
                  ("onnxruntime::concurrency::", "onnxruntime::"),
                  "create the InferenceSession in the child (or set intra_op_num_threads=1)"),
    NativeRuntime("gRPC's core", "gRPC", ("cygrpc", "libgrpc"), ("grpc_core::", "grpc_", "gpr_"),
                  "set GRPC_ENABLE_FORK_SUPPORT=1, or create channels and servers only after the fork"),
    NativeRuntime("PyTorch's intra-op thread pool", "PyTorch", ("libtorch_cpu", "libc10"),
                  ("c10::ThreadPool", "at::internal::", "at::parallel"),
                  "call torch.set_num_threads(1) in the parent"),
    NativeRuntime("Intel TBB", "TBB", ("libtbb",), ("tbb::",), "limit its arena to one thread"),
)

# Frames inside the runtime that only show *how* it waits; the culprit frame is the
# innermost one that names what it waits for (a barrier, a join, a park).
_PLUMBING = ("futex_wait", "do_wait", "do_spin", "syscall", "__GI_syscall", "sched_yield")


@dataclass(frozen=True)
class RuntimeHit:
    runtime: NativeRuntime
    index: int  # position of the culprit frame in the thread's frames
    frame: Frame  # the innermost frame of the runtime that is not wait plumbing
    caller: Frame | None  # the first frame outside the runtime that called into it (the library using it)


def runtime_of(thread: ThreadStack) -> RuntimeHit | None:
    """The innermost known runtime on a thread's native stack, or None."""
    runtimes = [r for r in RUNTIMES if not blinded(r.name, r.short, *r.libraries, *r.symbols)]
    for position, frame in enumerate(thread.frames):
        for runtime in runtimes:
            if not runtime.owns(frame):
                continue
            culprit_at = position
            for later in range(position, len(thread.frames)):
                candidate = thread.frames[later]
                if not runtime.owns(candidate):
                    break
                culprit_at = later
                if not (candidate.function or "").startswith(_PLUMBING):
                    break
            # The first named frame outside the runtime: an OpenMP region's outlined body has no name.
            caller = next((f for f in thread.frames[culprit_at + 1:]
                           if not runtime.owns(f) and f.function not in (None, "??")), None)
            return RuntimeHit(runtime, culprit_at, thread.frames[culprit_at], caller)
    return None


# Waits for another thread to signal (a condition variable, a barrier, a raw futex), as a pool's caller waits
# for its workers; a lock (mutex, semaphore, Python's lock) is the inherited-lock case, not this one.
SIGNAL_WAITS = ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_cond_wait_common",
                "pthread_barrier_wait", "std::condition_variable::wait", "std::condition_variable::__wait_until_impl",
                "syscall", "futex_wait", "futex_wait_simple", "do_futex_wait_simple")
LOCK_WAITS = ("pthread_mutex_lock", "lll_lock_wait", "lll_lock_wait_private", "sem_wait", "sem_timedwait",
              "sem_clockwait", "new_sem_wait_slow64", "PyThread_acquire_lock_timed", "PyThread_acquire_lock",
              "pthread_rwlock_rdlock", "pthread_rwlock_wrlock", "PyMutex_LockFlags", "_PyMutex_LockTimed")
_SYSTEM_LIBRARIES = ("libc.so", "libc-", "libpthread", "ld-linux", "libstdc++", "libgcc_s")
_INTERPRETER = ("Py", "_Py", "take_gil", "drop_gil", "PyThread", "_PyThread", "thread_run", "pythread_wrapper")


@dataclass(frozen=True)
class PoolWait:
    """A thread waiting to be signalled by code of a library that is not libc nor the interpreter: the shape of
    a pool's caller waiting for its workers, whatever the pool."""

    index: int  # position of the library's innermost frame
    frame: Frame  # that frame: what waits (a barrier, a task's future, a queue)
    caller: Frame | None  # the first named frame outside that library: who used the pool
    library: str  # the file name of the library that waits


def in_standard_library(name: str | None) -> bool:
    """A C++ or Rust standard library function, also as a template or generic instantiated in another library
    (``void std::condition_variable::wait<...>(...)``, ``<std::sys::sync::condvar::futex::Condvar>::wait``)."""
    head = (name or "").lstrip("<").split("(")[0].split("<")[0].strip()
    return head.rsplit(" ", 1)[-1].startswith(("std::", "core::"))


def _system(frame: Frame) -> bool:
    """libc's and the C++ runtime's frames, and a library's futex plumbing (stricter than evidence's notion,
    for which any underscore name is the system's: here ``__kmp_suspend`` is LLVM OpenMP's own)."""
    return (any(part in (frame.library or "") for part in _SYSTEM_LIBRARIES) or in_standard_library(frame.function)
            or (frame.function or "").lstrip("_").startswith(("futex", "lll_", "pthread_", "GI_", "syscall")))


_CALL_MACHINERY = ("libffi", "_ctypes")  # how Python called the library, not who used the pool


def pool_wait_of(thread: ThreadStack, spinning: bool = False) -> PoolWait | None:
    """Where a thread waits to be signalled by a library's own code, or None (a lock, the GIL, no native
    frames, or no library above libc). ``spinning``: the thread used CPU all along (a pool's spin-wait), which
    only its innermost library frame can tell from a computation: the caller must look for more."""
    # A wait for a signal: a condition variable or barrier of libc's on the way up from the innermost frame, or
    # a futex the kernel says the thread sleeps in, issued by the library's own code (OpenMP, Rust parking).
    signalled = False
    in_futex = spinning or (thread.kernel is not None and thread.kernel.syscall == "futex")
    for position, frame in enumerate(thread.frames):
        if frame.is_python:
            return None
        if matches(frame.function, LOCK_WAITS):
            return None  # a lock: who holds it is the question (fork-deadlock)
        signalled = signalled or matches(frame.function, SIGNAL_WAITS)
        if _system(frame) or (not frame.library and frame.function in (None, "??")):
            continue
        if not (signalled or in_futex):
            return None  # blocked in something else (a read, a poll): not a pool's wait
        if (frame.function or "").startswith(_INTERPRETER) or "libpython" in (frame.library or ""):
            return None  # the interpreter's own wait (the GIL, a Python lock)
        library = (frame.library or "").rsplit("/", 1)[-1]
        named = [f for f in thread.frames[position + 1:] if not f.is_python and f.function not in (None, "??")]
        outside = next((f for f in named if (f.library or "").rsplit("/", 1)[-1] != library), None)
        if outside is None or any(part in (outside.library or "") for part in _CALL_MACHINERY):
            outside = next((f for f in named if (f.library or "").rsplit("/", 1)[-1] == library), outside)
        return PoolWait(position, frame, outside, library or "?")
    return None
