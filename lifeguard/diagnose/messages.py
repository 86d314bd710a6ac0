"""The fatal messages native runtimes print before they abort, and what each means.

A crash's best witness is often the library's own last words on stderr: Qt's qFatal, a Tcl panic,
libstdc++'s terminate, glibc's heap checks, pybind11's GIL checks, a Rust panic. faulthandler's
"Fatal Python error: Aborted" only says that abort() was called. The whole stderr of a failed run is
scanned (bounded) for these lines, which are kept in order with their line numbers, so a finding can
quote the library and say whether the message came before the crash. One entry a message; add a
line to extend it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeguard.diagnose.blind import blinded
from lifeguard.model.result import StderrLine

# Bounds of the scan: the output cap keeps stderr under a few MiB; this keeps the scan and what it
# keeps small whatever the file holds.
MAX_SCAN_BYTES = 64 * 1024 * 1024
MAX_KEPT_LINES = 40
MAX_LINE_LENGTH = 400


@dataclass(frozen=True)
class LibraryMessage:
    library: str  # who prints it: "glibc", "libstdc++", "Qt", "Tcl", "CPython", "pybind11", "Rust"...
    pattern: re.Pattern[str]
    meaning: str  # what it says about the bug, for the finding
    hint: str  # what to do about it
    crash_marker: bool = False  # faulthandler's own report of the crash: the moment, not a cause
    about: str = ""  # what a rule can take it for: "refcount", "wrong-thread"


def _m(library: str, pattern: str, meaning: str, hint: str, crash_marker: bool = False,
       about: str = "") -> LibraryMessage:
    return LibraryMessage(library, re.compile(pattern), meaning, hint, crash_marker, about)


_SAID = "Read the message: the program or a library printed it just before the run went wrong."
_HEAP = "Run with PYTHONMALLOC=debug (or under valgrind / ASan) to stop at the first bad free or write."
_THREAD = ("An object was used or destroyed on a thread that does not own it: hand its destruction to the owning "
           "thread, or stop the threads before the object goes away.")

# What a free-threaded interpreter prints when a module turns its GIL on (LibraryMessage.about).
GIL_ENABLED = "gil-enabled"
# A line that speaks of fork (the shape entries below; fork-runtime's child that its library ended).
FORK_WORDS = r"\bfork(s|ed|ing)?\b|fork\(\)"

MESSAGES: tuple[LibraryMessage, ...] = (
    _m("Tcl", r"Tcl_AsyncDelete: async handler deleted by the wrong thread",
       "a Tcl interpreter (tkinter) was destroyed on a thread other than the one that created it",
       "Create, use and let go of every tkinter object on one thread; do not let gc collect them on a worker "
       "thread (break the reference cycles, or delete them explicitly on the main thread).", about="wrong-thread"),
    _m("Tcl", r"^(Tcl_Panic|.*\bpanic\b.*Tcl)", "Tcl panicked", "Read the Tcl message above; it names the misuse."),
    _m("Qt", r"QThread: Destroyed while thread is still running",
       "a QThread object was destroyed while its thread was still running",
       "Stop the thread (quit() and wait()) before the QThread object is destroyed, and before the "
       "interpreter exits (an atexit handler or aboutToQuit)."),
    _m("Qt", r"QObject::(~QObject|killTimer|startTimer|setParent): .*(another|different) thread",
       "a Qt object was used or destroyed from a thread other than its own", _THREAD, about="wrong-thread"),
    _m("Qt", r"^(ASSERT: |ASSERT failure in |qFatal|QFATAL)", "a Qt assertion or qFatal aborted",
       "Read the Qt message; it names the object and the check that failed."),
    _m("libstdc++", r"terminate called without an active exception",
       "std::terminate ran with no exception: a joinable std::thread was destroyed, or a thread was unwound "
       "(pthread_exit / forced unwinding) through a noexcept frame",
       "Join or detach every std::thread before it is destroyed; do not let a daemon thread be ended inside "
       "native code at interpreter shutdown (join it before exit)."),
    _m("libstdc++", r"terminate called after throwing an instance of '([^']+)'",
       "a C++ exception escaped a noexcept frame or a thread's entry function",
       "Catch the exception where it is thrown, or let it reach a frame that converts it to a Python error."),
    _m("libstdc++", r"pure virtual method called", "a C++ object was used while being destroyed (or after)",
       "Find who still uses the object during its destruction; stop its threads first."),
    _m("glibc", r"(double free or corruption|free\(\): (invalid pointer|double free detected|invalid size)|"
       r"malloc\(\): (corrupted|unaligned|memory corruption)|munmap_chunk\(\): invalid pointer|"
       r"corrupted size vs\. prev_size|malloc_consolidate\(\): |realloc\(\): invalid)",
       "glibc's heap check found memory freed twice, or a write past an allocation", _HEAP),
    _m("glibc", r"\*\*\* stack smashing detected \*\*\*", "a write past a stack buffer", _HEAP),
    _m("glibc", r": Assertion `.*' failed\.", "a C assert() failed", "Read the assertion: it names the check."),
    _m("pybind11", r"pybind11::(handle::(inc|dec)_ref\(\)|gil_scoped_acquire|object_api).*(GIL|PyGILState_Check)",
       "pybind11 saw a Python object's reference count changed without the GIL",
       "Hold the GIL (py::gil_scoped_acquire) wherever py::object copies or destructors run, including in "
       "static destructors and worker threads."),
    _m("nanobind", r"nanobind: leaked \d+ (instances|types|functions)",
       "nanobind found objects still alive at shutdown", "Release them before exit (module cleanup/atexit)."),
    _m("Rust", r"thread '[^']*'( \(\d+\))? panicked at", "a Rust panic (in a pyo3 or other Rust extension)",
       "Read the panic message and location; RUST_BACKTRACE=1 shows its stack."),
    _m("Rust", r"fatal runtime error: ", "the Rust runtime aborted", "Read the message; RUST_BACKTRACE=1."),
    _m("OpenMP", r"OMP: (Error|Warning) #\d+", "the LLVM/Intel OpenMP runtime reported an error",
       "Read the OMP message: two OpenMP runtimes loaded in one process is the usual cause."),
    _m("OpenMP", r"^libgomp: ", "GNU OpenMP reported an error", "Read the libgomp message."),
    _m("CUDA", r"Cannot re-initialize CUDA in forked subprocess|CUDA error: initialization error",
       "CUDA was used in a forked child after the parent initialised it",
       "Use the 'spawn' start method for processes that use CUDA."),
    _m("CPython", r"Fatal Python error: \w+: (deallocating None|deallocating True|deallocating False|"
       r".*refcount error|.*negative ref(erence)? ?count)",
       "an object that must never be freed (None, True, False, a static type) or an object with a negative "
       "reference count: an extension released a reference it did not own",
       "Find the extension's Py_DECREF of a borrowed reference (Py_None returned without Py_RETURN_NONE / "
       "Py_NewRef, PyTuple_GetItem / PyDict_GetItem results); a debug-build interpreter or -X dev catches it "
       "at the first bad release.", about="refcount"),
    _m("CPython", r"Fatal Python error: (PyThreadState_Get|_PyThreadState_GET|PyEval_SaveThread|take_gil|"
       r"PyGILState_Release|PyEval_RestoreThread|drop_gil|_PyMem_DebugMalloc|_PyObject_AssertFailed|"
       r"_Py_Dealloc|Py_EndInterpreter|init_threadstate|_PyErr_|PyInterpreterState|_Py_CheckFunctionResult)",
       "CPython caught a C extension misusing the C API (the message names the check)",
       "Read CPython's message: it names the API called in the wrong state (without the GIL, after "
       "finalization, with an error set)."),
    _m("CPython", r"Fatal Python error: (Segmentation fault|Aborted|Bus error|Floating-point exception|"
       r"Illegal instruction)", "faulthandler's report of the fatal signal", "", crash_marker=True),
    _m("CPython", r"^Exception ignored (in|on|while)", "Python ignored an exception (often during shutdown)",
       "Read the traceback under it: it is often the first sign of the shutdown order going wrong."),
    # Not a cause: a free-threaded interpreter says its GIL is on from here (so threads' states are a GIL's).
    _m("CPython", r"The global interpreter lock \(GIL\) has been enabled",
       "a free-threaded interpreter turned its GIL on to load a module that does not declare it can run without "
       "one", "Declare Py_mod_gil (Py_MOD_GIL_NOT_USED) once the module is safe without the GIL; PYTHON_GIL=0 keeps "
       "the GIL off to test it.", about=GIL_ENABLED),
    # By shape, for the libraries no entry above names (last, so a named entry wins): a message at the start
    # of a line (not a traceback's indented source) that says it is fatal, or that warns about fork, threads
    # or the interpreter's shutdown.
    _m("", r"^(?=\S).*(?i:\b(wrong|another|different|other|non-main|foreign) thread\b|thread[- ]affin)",
       "an object was used or destroyed on a thread that does not own it", _THREAD, about="wrong-thread"),
    _m("", r"^(?=\S).*(?i:\bref(erence)?[ -]?count)", "a reference count went wrong (released once too often)",
       "Find the extension's Py_DECREF of a borrowed reference; a debug-build interpreter or -X dev catches it at "
       "the first bad release.", about="refcount"),
    _m("", r"^(?=\S).*\b(?i:fatal|abort(ed|ing)?|panic(ked|king)?|terminat(e|ed|ing))\b",
       "the program or a library said it stops", _SAID),
    _m("", r"^(?=\S)(?=.*(?i:" + FORK_WORDS + r"|multi-?thread|\bthreads?\b|thread-?safe|concurren|"
       r"finaliz|shutdown|at exit))(?=.*(?i:warn|error|unsafe|not (safe|supported|allowed)|deadlock|detected|"
       r"cannot|can not|must not|invalid|incompatible|disabl|destroy|delet|still running|leak))",
       "the program or a library warned about fork, threads or shutdown", _SAID, about="warning"),
)


def identify(line: str) -> LibraryMessage | None:
    """The table entry a stderr line matches, or None (a named entry switched off by blind judging is
    skipped: the entries by shape, and faulthandler's own crash report, still speak)."""
    for message in MESSAGES:
        if message.library and not message.crash_marker and blinded(message.library):
            continue
        if message.pattern.search(line):
            return message
    return None


def scan_lines(lines: Sequence[str]) -> tuple[StderrLine, ...]:
    """The lines (without their ends, as splitlines gives them) that match a table entry, with their 1-based line
    numbers, at most MAX_KEPT_LINES (the first ones: the earliest message is usually the cause, later ones its
    consequences)."""
    kept = []
    for number, line in enumerate(lines, 1):
        if identify(line) is None:
            continue
        after = lines[number] if number < len(lines) else ""
        if line.endswith(":") and after[:1].strip() and identify(after) is None:
            line += " " + after  # a header whose message is on the next line (a Rust panic's, since 1.73)
        kept.append(StderrLine(number, line[:MAX_LINE_LENGTH]))
        if len(kept) >= MAX_KEPT_LINES:
            break
    return tuple(kept)


def scan_file(path: Path) -> tuple[StderrLine, ...]:
    """Scan a whole (bounded) stderr file; nothing when it cannot be read."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_SCAN_BYTES)
    except OSError:
        return ()
    return scan_lines(data.decode(errors="replace").splitlines())


@dataclass(frozen=True)
class Quote:
    """A library message as a finding quotes it."""

    line: StderrLine
    message: LibraryMessage
    before_crash: bool | None  # printed before faulthandler's report of the crash; None when there is none

    @property
    def speaker(self) -> str:
        """Who said it: the library a table entry names, else the run's stderr."""
        return self.message.library or "stderr"

    def __str__(self) -> str:
        return f"{self.speaker}: \"{self.line.text.strip()}\""


def library_quotes(lines: tuple[StderrLine, ...]) -> list[Quote]:
    """The library messages of a run (not faulthandler's crash report), in order."""
    marker = next((line.number for line in lines if (m := identify(line.text)) and m.crash_marker), None)
    quotes = []
    for line in lines:
        message = identify(line.text)
        if message is None or message.crash_marker:
            continue
        quotes.append(Quote(line, message, None if marker is None else line.number < marker))
    return quotes


def cause_quote(lines: tuple[StderrLine, ...]) -> Quote | None:
    """The message most likely to be the cause: the first fatal one, else the first warning about fork,
    threads or shutdown, else the first ignored exception."""
    quotes = [q for q in library_quotes(lines) if q.message.about != GIL_ENABLED]
    ignored = [q for q in quotes if q.line.text.startswith("Exception ignored")]
    warnings = [q for q in quotes if q.message.about == "warning"]
    fatal = [q for q in quotes if q not in ignored and q not in warnings]
    chosen = fatal or warnings or ignored
    return chosen[0] if chosen else None
