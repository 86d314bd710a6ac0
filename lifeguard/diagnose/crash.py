"""What the crash rules share: the crashing thread, the frame that really crashed (under the signal,
abort, assert, terminate and unwinding plumbing), the cleanup the main thread was running, and the
library message that explains it."""

from __future__ import annotations

from lifeguard.diagnose.evidence import Evidence, describe, matches
from lifeguard.diagnose.messages import Quote, cause_quote
from lifeguard.diagnose.runtimes import in_standard_library
from lifeguard.model.outcomes import Outcome
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

# How a crash is delivered and reported, never where it happened: signal delivery and faulthandler's
# re-raise, abort/assert, CPython's fatal error path, libstdc++'s terminate and C++ unwinding.
SIGNAL_PLUMBING = (
    "raise", "__GI_raise", "gsignal", "abort", "__GI_abort", "__pthread_kill_implementation",
    "__pthread_kill_internal", "__pthread_kill", "pthread_kill", "__restore_rt", "killpg", "kill",
    "faulthandler_fatal_error", "faulthandler_dump_traceback", "_Py_FatalErrorFunc", "_Py_FatalErrorFormat",
    "fatal_error", "fatal_error_exit", "_Py_FatalError", "Py_FatalError", "_Py_FatalRefcountError",
    "__libc_message", "__libc_message_impl", "__assert_fail", "__assert_fail_base", "__fortify_fail",
    "__stack_chk_fail", "malloc_printerr", "__gnu_cxx::__verbose_terminate_handler", "std::terminate",
    "__cxxabiv1::__terminate", "__cxa_call_terminate", "__cxa_throw", "__cxa_rethrow", "__gxx_personality_v0",
    "_Unwind_ForcedUnwind", "_Unwind_RaiseException", "_Unwind_Resume", "__pthread_unwind", "__do_cancel",
    "_Unwind_ForcedUnwind_Phase2", "__cxa_begin_catch",
)
# Libraries whose unnamed frames are plumbing too (stripped libstdc++ and libgcc_s show "??").
_LIBC = ("libc.so", "libc-")  # how the C library's file is named
_PLUMBING_LIBRARIES = ("libstdc++", "libgcc_s", *_LIBC)
# Where the interpreter runs its shutdown, and what each step means for a finding.
CLEANUP_STEPS = (
    (("atexit_callfuncs", "atexit_call", "_PyAtExit_Call", "call_ll_exitfuncs"), "an atexit callback"),
    (("finalize_modules", "_PyImport_Cleanup", "finalize_modules_clear_weaklist", "finalize_modules_delete_special"),
     "module finalization (modules' globals cleared)"),
    (("_PyGC_CollectNoFail", "finalize_interp_clear", "finalize_interp_types", "_PyExc_Fini", "_PyTypes_Fini",
      "_PyStaticType_Dealloc"), "the interpreter's final clean-up (builtin types and objects freed)"),
    (("wait_for_thread_shutdown", "threading_shutdown"), "threading's shutdown (joining non-daemon threads)"),
    (("__run_exit_handlers", "__cxa_finalize", "_dl_fini"), "the C library's exit handlers (static destructors)"),
    (("Py_FinalizeEx", "Py_Finalize", "_Py_Finalize"), "Py_FinalizeEx"),
)
# The interpreter's own calls and the C glue around them, skipped to find the code someone else wrote.
_GLUE_LIBRARIES = ("libffi", "_ctypes", *_LIBC, "libstdc++", "libgcc_s", "ld-linux", "libpthread")


def is_plumbing(frame: Frame) -> bool:
    if frame.is_python:
        return False
    if not frame.function or frame.function == "??":
        return any(part in (frame.library or "") for part in _PLUMBING_LIBRARIES)
    # faulthandler's own handlers (a stripped build may name their cold parts oddly: faulthandler_sigabrt.cold).
    return matches(frame.function, SIGNAL_PLUMBING) or frame.function.startswith("faulthandler")


def crashed_thread(evidence: Evidence) -> tuple[ProcessStacks, ThreadStack] | None:
    """The thread the fatal signal went to (from a core or a replay), or None without native stacks."""
    for process in evidence.processes:
        if process.signal is None or not process.signal.is_crash:
            continue
        thread = process.thread(process.signal.tid) if process.signal.tid else None
        thread = thread or (process.threads[0] if process.threads else None)
        if thread is not None:
            return process, thread
    return None


def crash_of(evidence: Evidence) -> tuple[ProcessStacks, ThreadStack] | None:
    """The crashed thread of a crashed run; None for any other outcome or without native stacks."""
    return crashed_thread(evidence) if evidence.outcome is Outcome.CRASHED else None


def crash_frame(thread: ThreadStack) -> tuple[int, Frame] | None:
    """The innermost frame that is not crash plumbing: where the crash happened (``os_abort_impl``, not
    ``abort``; the C++ frame a forced unwind hit, not ``__gxx_personality_v0``)."""
    aborted = next((at for at in range(len(thread.frames) - 1, -1, -1)
                    if matches(thread.frames[at].function, ("abort", "__GI_abort"))), None)
    for position, frame in enumerate(thread.frames):
        if aborted is not None and position > aborted and (_in_libc(frame) or _runtime_panic(frame)):
            continue  # the runtime's callers of abort (assert, heap checks, a Rust panic's hook): a report
        # An unnamed frame of a library is still where it crashed ("?? in libfoo.so"), not its caller in libc.
        if not frame.is_python and not is_plumbing(frame) and (frame.function or frame.library):
            return position, frame
    return None


def _runtime_panic(frame: Frame) -> bool:
    """A frame of a standard library's way to a deliberate abort: Rust's panic machinery (std::panicking,
    core::panicking, __rustc::rust_begin_unwind) and C++'s std:: functions."""
    name = frame.function or ""
    return not frame.is_python and (in_standard_library(name) or name.lstrip("_").startswith(("rustc::", "rust_")))


def _in_libc(frame: Frame) -> bool:
    return not frame.is_python and any(part in (frame.library or "") for part in _LIBC)


def foreign_frame(thread: ThreadStack, start: int = 0) -> Frame | None:
    """The first native frame from ``start`` on that is neither the interpreter nor C/FFI glue: the
    extension or library code involved."""
    for frame in thread.frames[start:]:
        if frame.is_python or frame.in_interpreter or is_plumbing(frame):
            continue
        if any(part in (frame.library or "") for part in _GLUE_LIBRARIES):
            continue
        return frame
    return None


def cleanup_step(thread: ThreadStack) -> tuple[str, Frame] | None:
    """What part of the interpreter's shutdown a thread is in (innermost step first), or None."""
    for frame in thread.frames:
        if frame.is_python:
            continue
        for names, step in CLEANUP_STEPS:
            if matches(frame.function, names):
                return step, frame
    return None


def main_thread(process: ProcessStacks) -> ThreadStack | None:
    return process.thread(process.pid) or (process.threads[0] if process.threads else None)


def quote_text(evidence: Evidence) -> tuple[str, Quote | None]:
    """``; the library said: libstdc++: "terminate called ..."`` (and the quote), or faulthandler's fatal
    error line when no library spoke."""
    quote = cause_quote(evidence.stderr_messages)
    if quote is not None:
        when = "" if quote.before_crash is None else (" before the crash" if quote.before_crash else "")
        return f"; {quote.speaker} said{when}: \"{quote.line.text.strip()}\" ({quote.message.meaning})", quote
    if evidence.fatal_error:
        return f": {evidence.fatal_error}", None
    return "", None


def where(frame: Frame | None) -> str:
    """``run_callbacks (cbloop.cpp:5) in libcbloop.so``: a frame with its library."""
    if frame is None:
        return "unknown code"
    text = describe(frame)
    if frame.library and " in " not in text:
        text += f" in {frame.library.rsplit('/', 1)[-1]}"
    return text
