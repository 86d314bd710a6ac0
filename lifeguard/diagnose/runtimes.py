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
    for position, frame in enumerate(thread.frames):
        for runtime in RUNTIMES:
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
