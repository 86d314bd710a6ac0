"""Backtraces as data: every thread of every process of a run, native and Python frames.

Capture backends (gdb on a live process or a core, a faulthandler dump) fill these
types; reports, findings and the terminal read them. Each type round-trips through
JSON with ``to_dict()`` / ``from_dict()`` so report.json carries them unchanged.

Python frames are modelled as ``Frame`` objects with ``is_python=True`` whose
``function``/``file``/``line`` are the Python function, source file and line. They
sit in ``ThreadStack.frames`` just before (newer than) the native
``_PyEval_EvalFrameDefault`` frame that executes them, the order ``py-bt`` and
pystack use, so one list reads innermost to outermost across both worlds.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lifeguard.model.kernel import KernelState
from lifeguard.model.signals import SignalInfo

EVAL_FRAME_FUNCTION = "_PyEval_EvalFrameDefault"
# GCC's names for the parts and clones of one function (split cold code, link-time and IPA clones), as
# distribution builds show them: _PyEval_EvalFrameDefault.cold, take_gil.lto_priv.0, f.constprop.0.isra.0.
_CLONE_SUFFIX = re.compile(r"(?:\.(?:cold|lto_priv|constprop|isra|part|localalias|clone)(?:\.\d+)?)+$")


def base_function(name: str) -> str:
    """The function a compiler's part or clone belongs to (``take_gil.lto_priv.0``: ``take_gil``)."""
    return _CLONE_SUFFIX.sub("", name)


_PYTHON_EXECUTABLE = re.compile(r"python[\d.]*[a-z]*")
# Python source of the harness, not of the program (a forked test carries the whole pytest call chain under
# its body; a replay under gdb runs the bootstrap as a script): findings, terminal and report.html ask this.
HARNESS_FILES = ("/lifeguard/child/", "/lifeguard/pytest_plugin/", "/lifeguard/run/fork_here.py", "/lifeguard_boot.py",
                 "<frozen runpy>", "/runpy.py", "/_pytest/", "/pluggy/", "/pytest/__main__.py")
# Neither the program's nor the harness's: standard library, installed packages, ``-c`` code (the bootstrap's).
LIBRARY_FILES = ("/lib/python3", "site-packages", "<frozen ", "<string>")


def is_harness_file(path: str | None) -> bool:
    """Source of lifeguard's or the test runner's, there in every run: hidden, never blamed."""
    return bool(path) and any(part in str(path) for part in HARNESS_FILES)


def is_user_file(path: str | None) -> bool:
    """Source of the program's own: not the harness, the standard library or an installed package."""
    return bool(path) and not is_harness_file(path) and not any(part in str(path) for part in LIBRARY_FILES)


# GIL states of a thread (ThreadStack.gil); None when it cannot be told.
GIL_HELD = "held"
GIL_WAITING = "waiting"
GIL_RELEASED = "released"
GIL_STATES = (GIL_HELD, GIL_WAITING, GIL_RELEASED)
# A free-threaded interpreter with its GIL off has no GIL: a thread in PyGILState_Ensure and its kind waits to
# attach its thread state (held off by a stop-the-world pause or the runtime's lock); which threads are attached
# no reader tells, so the others have no state.
ATTACH_WAITING = "waiting to attach"

# Native functions that are on a stack only while the thread acquires the GIL:
# the MXNet fork deadlock shows a native thread parked in PyGILState_Ensure ->
# take_gil while the forking thread holds the GIL.
GIL_ACQUIRE_FUNCTIONS = frozenset(
    {"take_gil", "PyEval_RestoreThread", "PyGILState_Ensure", "PyEval_AcquireThread", "PyEval_AcquireLock"}
)


@dataclass(frozen=True)
class Frame:
    """One frame: native (function, source, shared object, pc) or Python (is_python)."""

    function: str | None  # demangled; None when gdb knows no symbol for the pc
    file: str | None = None
    line: int | None = None
    library: str | None = None  # shared object path; None for the executable or unknown
    address: str | None = None  # pc as "0x..."; None for Python frames
    is_python: bool = False
    inline: bool = False  # a native frame gdb reconstructed from inlining (same pc as its caller)
    # The function its call instruction names (a PLT stub's symbol), read where the frame it called has no name:
    # a library without symbols still says what was called (pthread_join, from libc without its debug symbols).
    calls: str | None = None

    @property
    def in_interpreter(self) -> bool:
        """A native frame of the interpreter itself: libpython or a statically linked python executable
        (not an extension module under lib/python3.X/, whose path also says "python3")."""
        name = (self.library or "").rsplit("/", 1)[-1]
        return not self.is_python and (name.startswith("libpython") or _PYTHON_EXECUTABLE.fullmatch(name) is not None)

    @property
    def is_harness(self) -> bool:
        """A Python frame of the harness (is_harness_file): there in every run, hidden on the terminal."""
        return self.is_python and is_harness_file(self.file)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "library": self.library,
            "address": self.address,
            "is_python": self.is_python,
            "inline": self.inline,
        }
        if self.calls:
            data["calls"] = self.calls
        if self.is_harness:
            data["harness"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Frame:
        line = data.get("line")
        return cls(
            function=data.get("function"),
            file=data.get("file"),
            line=int(line) if line is not None else None,
            library=data.get("library"),
            address=data.get("address"),
            is_python=bool(data.get("is_python", False)),
            inline=bool(data.get("inline", False)),
            calls=data.get("calls"),
        )

    @property
    def is_eval_frame(self) -> bool:
        """The native frame of CPython's bytecode loop (it runs one or more Python frames)."""
        return not self.is_python and base_function(self.function or "") == EVAL_FRAME_FUNCTION

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f" at {self.file}:{self.line}" if self.line is not None else f" at {self.file}"
        if self.is_python:
            return f"{self.function or '??'} (Python){where}"
        library = f" in {_short_library(self.library)}" if self.library else ""
        return f"{self.function or '??'}{where}{library}"


@dataclass(frozen=True)
class ThreadStack:
    """The stack of one thread, innermost frame first."""

    tid: int  # kernel thread id (LWP)
    name: str | None = None  # /proc/PID/task/TID/comm
    gil: str | None = None  # "held" / "waiting" / "released" / ATTACH_WAITING; None when unknown
    frames: tuple[Frame, ...] = ()
    # pthread_t of the thread: what faulthandler prints as "Thread 0x...", and
    # what CPython stores in PyThreadState.thread_id.
    pthread_id: int | None = None
    kernel: KernelState | None = None  # what /proc said the thread did across the capture window

    @property
    def python_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if f.is_python)

    def title(self, *, pthread: bool = False) -> str:
        """``Thread 7 "python" GIL held, blocked in futex``: how every report heads a thread."""
        text = f"Thread {self.tid}" + (f' "{self.name}"' if self.name else "")
        if pthread and self.pthread_id is not None:
            text += f" (pthread 0x{self.pthread_id:x})"
        if self.gil == ATTACH_WAITING:
            text += f" {ATTACH_WAITING}"
        elif self.gil is not None:
            text += f" GIL {self.gil}"
        return text + (f", {self.kernel.label()}" if self.kernel is not None else "")

    def function_names(self) -> list[str]:
        """Names of the native frames, innermost first (handy for pattern rules)."""
        return [f.function for f in self.frames if not f.is_python and f.function]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tid": self.tid,
            "name": self.name,
            "gil": self.gil,
            "pthread_id": self.pthread_id,
            "kernel": self.kernel.to_dict() if self.kernel else None,
            "frames": [f.to_dict() for f in self.frames],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThreadStack:
        pthread_id = data.get("pthread_id")
        kernel = data.get("kernel")
        return cls(
            tid=int(data["tid"]),
            name=data.get("name"),
            gil=data.get("gil"),
            frames=tuple(Frame.from_dict(f) for f in data.get("frames", ())),
            pthread_id=int(pthread_id) if pthread_id is not None else None,
            kernel=KernelState.from_dict(kernel) if kernel else None,
        )


class Backend(str, enum.Enum):
    """What captured a process's native stacks."""

    GDB = "gdb"  # gdb attached to the live process
    CORE = "core"  # gdb on the core file the process left
    REPLAY = "replay"  # gdb ran the run again and stopped where it crashed
    PYSTACK = "pystack"  # pystack read the live process (native and Python frames)
    PYSTACK_CORE = "pystack-core"  # pystack read the core file the process left
    EU_STACK = "eu-stack"  # elfutils' eu-stack unwound the live process (native frames only)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class ProcessStacks:
    """Backtraces of every thread of one process, or why there are none (``error``)."""

    pid: int
    ppid: int | None = None
    exe: str | None = None
    cmdline: tuple[str, ...] = ()
    backend: Backend = Backend.GDB  # what produced the native stacks
    python_gdb: bool = False  # Python frames from the interpreter's python-gdb extension
    faulthandler: bool = False  # Python frames merged in from a faulthandler dump
    free_threaded: bool = False  # a free-threaded interpreter whose GIL was off: no thread holds a GIL
    threads: tuple[ThreadStack, ...] = ()
    error: str | None = None  # capture failed (attach refused, no such process, timeout)
    signal: SignalInfo | None = None  # cores only
    notes: tuple[str, ...] = ()  # non-fatal problems worth showing next to the stacks
    duration: float | None = None  # seconds the capture took

    @property
    def ok(self) -> bool:
        return self.error is None

    @functools.cached_property
    def text(self) -> str:
        """This process as render_text shows it; rendered once however many sinks show it."""
        return render_text([self])

    @property
    def backend_label(self) -> str:
        """``gdb``, ``core+python-gdb``, ``gdb+faulthandler``...: the back end and where Python frames came from."""
        return "+".join([self.backend.value] + ["python-gdb"] * self.python_gdb + ["faulthandler"] * self.faulthandler)

    def thread(self, tid: int) -> ThreadStack | None:
        return next((t for t in self.threads if t.tid == tid), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "exe": self.exe,
            "cmdline": list(self.cmdline),
            "backend": self.backend_label,
            **({"free_threaded": True} if self.free_threaded else {}),
            "threads": [t.to_dict() for t in self.threads],
            "error": self.error,
            "signal": self.signal.to_dict() if self.signal else None,
            "notes": list(self.notes),
            "duration": self.duration,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessStacks:
        signal = data.get("signal")
        label = str(data.get("backend") or Backend.GDB.value).split("+")
        return cls(
            pid=int(data["pid"]),
            ppid=data.get("ppid"),
            exe=data.get("exe"),
            cmdline=tuple(data.get("cmdline", ())),
            backend=Backend(label[0]),
            python_gdb="python-gdb" in label,
            faulthandler="faulthandler" in label,
            free_threaded=data.get("free_threaded") is True,
            threads=tuple(ThreadStack.from_dict(t) for t in data.get("threads", ())),
            error=data.get("error"),
            signal=SignalInfo.from_dict(signal) if signal else None,
            notes=tuple(data.get("notes", ())),
            duration=data.get("duration"),
        )

    def __str__(self) -> str:
        state = f"error: {self.error}" if self.error else f"{len(self.threads)} threads"
        return f"process {self.pid} ({self.backend_label}): {state}"


def infer_gil(
    frames: Iterable[Frame], pthread_id: int | None, gil_locked: bool | None, gil_holder: int | None
) -> str | None:
    """A thread's GIL state from its native stack and, where readable, the GIL's own fields.

    A thread inside take_gil / PyGILState_Ensure / PyEval_RestoreThread is waiting,
    whatever the GIL's fields say. Otherwise only the interpreter knows who holds it
    (``gil_locked`` and the holder's pthread_t, read by gdb from ``last_holder``);
    without those the answer is None rather than a guess.
    """
    if any(not f.is_python and base_function(f.function or "") in GIL_ACQUIRE_FUNCTIONS for f in frames):
        return GIL_WAITING
    if gil_locked is None:
        return None
    if gil_locked and gil_holder is not None and pthread_id is not None and gil_holder == pthread_id:
        return GIL_HELD
    if gil_locked and gil_holder is None:
        return None  # locked, but by whom is unreadable
    return GIL_RELEASED


FREE_THREADED_NOTE = ("a free-threaded interpreter with its GIL off: no thread holds a GIL; a thread entering "
                      "Python waits to attach (a stop-the-world pause or the runtime's lock holds it off)")


def without_gil(process: ProcessStacks) -> ProcessStacks:
    """A process of a free-threaded interpreter whose GIL is off, as its readers cannot tell: what they took for
    waiting on the GIL is waiting to attach, and no thread holds or released a GIL."""
    if process.free_threaded:
        return process
    threads = tuple(replace(t, gil=ATTACH_WAITING if t.gil == GIL_WAITING else None) for t in process.threads)
    return replace(process, free_threaded=True, threads=threads, notes=(FREE_THREADED_NOTE, *process.notes))


def _short_library(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def render_text(processes: Iterable[ProcessStacks]) -> str:
    """A compact, gdb-``bt``-like text of every thread of every process.

    Native frames are numbered like gdb does; Python frames are marked ``py`` and
    shown right above the ``_PyEval_EvalFrameDefault`` frame that runs them.
    """
    lines: list[str] = []
    for process in processes:
        title = f"Process {process.pid}"
        if process.ppid is not None:
            title += f" (parent {process.ppid})"
        command = " ".join(process.cmdline) or process.exe
        if command:
            title += f": {command}"
        lines.append(f"{title}  [{process.backend_label}]")
        if process.signal is not None:
            where = f" in thread {process.signal.tid}" if process.signal.tid is not None else ""
            lines.append(f"  killed by {process.signal}{where}")
        if process.error:
            lines.append(f"  capture failed: {process.error}")
        for note in process.notes:
            lines.append(f"  note: {note}")
        for thread in process.threads:
            lines.extend(_render_thread(thread, process.signal))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n" if lines else ""


def _render_thread(thread: ThreadStack, signal: SignalInfo | None) -> list[str]:
    header = f"  {thread.title(pthread=True)}"
    if signal is not None and signal.tid == thread.tid:
        header += f"  <-- {signal.name or 'signal'}"
    lines = [header]
    number = 0
    for frame in thread.frames:
        if frame.is_python:
            location = f"{frame.file}:{frame.line}" if frame.line is not None else f"{frame.file}"
            lines.append(f"        py  {frame.function or '??'} ({location})")
            continue
        address = "" if frame.inline or not frame.address else f"{frame.address} "
        source = ""
        if frame.file:
            source = f" at {frame.file}:{frame.line}" if frame.line is not None else f" at {frame.file}"
        library = f" [{_short_library(frame.library)}]" if frame.library else ""
        lines.append(f"    #{number:<3} {address}{frame.function or '??'}{source}{library}")
        number += 1
    if not thread.frames:
        lines.append("    (no frames)")
    return lines


def processes_to_json(processes: Iterable[ProcessStacks]) -> list[dict[str, Any]]:
    return [p.to_dict() for p in processes]


def processes_from_json(data: Iterable[Mapping[str, Any]]) -> list[ProcessStacks]:
    return [ProcessStacks.from_dict(p) for p in data]


__all__ = [
    "ATTACH_WAITING", "EVAL_FRAME_FUNCTION", "GIL_ACQUIRE_FUNCTIONS", "GIL_HELD", "GIL_RELEASED", "GIL_STATES",
    "GIL_WAITING", "Frame", "ProcessStacks", "ThreadStack", "base_function", "infer_gil", "processes_from_json",
    "processes_to_json", "render_text", "is_harness_file", "is_user_file", "without_gil",
]
