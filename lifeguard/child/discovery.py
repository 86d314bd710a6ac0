"""The discovery process: import scenario files and report what they declare, as data.

A scenario file's top level is the user's code: it may exit, crash, fork, hang or take over signals, so
lifeguard never imports one itself. ``lifeguard.plan.discovery`` starts this module in a child of its own
interpreter (own session, a deadline, bounded output, its whole tree killed at the end) with the request on
stdin (protocol.DISCOVERY_REQUEST_KEYS). It imports each file as the supervisor used to, and every
``@lifeguard.scenario`` that runs records its arguments and its function's name, file, line and docstring:
the shim in ``lifeguard/__init__.py`` forwards to ``declare`` while DISCOVER_ENV is set. The supervisor
checks the definitions on that data, so a bad one gets the same message as ever.

Records go out on an inherited pipe, one Python literal a line, as they happen: when the process dies
half-way, the supervisor still knows which file it was loading. Standard library and child/ only.
"""

from __future__ import annotations

import os
import sys

from lifeguard.child import protocol, unpatched

TYPE_CHECKING = False  # typing itself costs start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Nesting kept in a recorded value (deeper: its repr); a dict that holds itself must not recurse forever.
MAX_DEPTH = 20
# Ints above this many bits travel as their size: Python refuses to print ints of over 4300 digits.
MAX_INT_BITS = 4096
# What a forked copy of the discovery process exits with, at once (nothing in it may run on).
FORKED_COPY_STATUS = 0

# Set by main(), in the discovery process only: "pid", "fd" (the records' pipe), the file "loading" and
# "declared", (function, path) of every declaration so far.
_state: dict[str, Any] = {}


def declare(fixture: object, options: dict[str, Any]) -> Callable[[Any], Any]:
    """``@lifeguard.scenario(fixture, **options)`` in the discovery process: record, check nothing."""

    def decorate(func: Any) -> Any:
        code = getattr(func, "__code__", None)
        doc = getattr(func, "__doc__", None)
        function, path = plain(func.__name__), plain(code.co_filename if code else "")
        if _state.get("pid") == os.getpid():
            _state["declared"].append((function, path))
        _write(protocol.DECLARED, function=function, path=path, line=plain(code.co_firstlineno if code else 0),
               doc=doc if isinstance(doc, str) else None, body=_body_kind(code), fixture=plain(fixture),
               options={str(key): plain(value) for key, value in options.items()})
        return func

    return decorate


# Code flags (as inspect names them) of a body that calling does not run: it only makes a coroutine or a
# generator. Read from the code object: importing inspect would cost the discovery its start-up time.
CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR = 0x20, 0x80, 0x200


def _body_kind(code: Any) -> str | None:
    """What model.scenario.body_kind says of the function whose code this is."""
    flags = getattr(code, "co_flags", 0)
    if flags & (CO_COROUTINE | CO_ASYNC_GENERATOR):
        return "an async def"
    return "a generator function" if flags & CO_GENERATOR else None


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain literals (None, bool, int, float, str, list, tuple, dict), as the supervisor's checks
    saw the real one: a mapping becomes a dict, a subclass of int, float or str its base, anything else a
    (PLAIN_TAG, "repr", text) that the supervisor shows as the object's repr."""
    if value is None or isinstance(value, bool):
        return value if value is None else bool(value)
    if isinstance(value, int):
        number = int(value)
        return number if number.bit_length() <= MAX_INT_BITS else _opaque(f"<an int of {number.bit_length()} bits>")
    if isinstance(value, float):
        real = float(value)
        return real if real - real == 0 else (protocol.PLAIN_TAG, "float", repr(real))
    if isinstance(value, str):
        return str(value)
    if depth >= MAX_DEPTH:
        return _opaque(_repr(value))
    from collections.abc import Mapping

    if isinstance(value, Mapping):
        return {plain(key, depth + 1): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [plain(item, depth + 1) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, (set, frozenset)):
        return tuple(plain(item, depth + 1) for item in value)
    return _opaque(_repr(value))


def _opaque(text: str) -> tuple[str, str, str]:
    return (protocol.PLAIN_TAG, "repr", text)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # the user's __repr__ failing is no reason to lose the rest
        return f"<{type(value).__name__} whose repr() raised {type(exc).__name__}>"


def _write(kind: str, **fields: Any) -> None:
    """One record on the pipe, written whole; only by the discovery process itself (a copy stays silent)."""
    if _state.get("pid") != os.getpid():
        return
    view = memoryview((repr({protocol.EVENT_KEY: kind, **fields}) + "\n").encode())
    while view:
        view = view[os.write(_state["fd"], view):]


def _line_in_stack(path: str) -> int:
    """The line of the innermost frame of ``path`` on the current stack (0: none)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == path:
            return frame.f_lineno or 0
        frame = frame.f_back  # type: ignore[assignment]
    return 0


def _after_fork_in_parent() -> None:
    loading = _state.get("loading") or ""
    _write(protocol.FORKED_AT_IMPORT, path=loading, line=_line_in_stack(loading))


def _after_fork_in_child() -> None:
    # A copy of the discovery process must not go on importing, declaring or writing: it ends here.
    os._exit(FORKED_COPY_STATUS)


def _line_in_traceback(path: str, exc: BaseException) -> int:
    """The line of the last frame of ``path`` in the traceback of ``exc`` (0: none)."""
    line = 0
    tb = exc.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(path: str, exc: BaseException) -> dict[str, Any]:
    """What an import raised, as data (its str() is the user's code: it may fail too)."""
    try:
        message = str(exc)
    except Exception:
        message = _repr(exc)
    found: dict[str, Any] = {"type": type(exc).__name__, "message": message, "line": _line_in_traceback(path, exc)}
    if isinstance(exc, SyntaxError):
        found.update(syntax=str(exc.msg), line=exc.lineno or 0)
    if isinstance(exc, SystemExit):
        found["exit"] = plain(exc.code)
    return found


def load(path: str) -> tuple[dict[str, Any] | None, list[str]]:
    """Import one scenario file, its folder first on sys.path (as Python would for a script); return what
    it raised (None) and the functions declared in it that a run could not take from it by name."""
    module_name = "lifeguard_scenarios_" + "".join(c if c.isalnum() else "_" for c in path)
    module = unpatched.file_module(module_name, path)
    if module is None:
        return {"type": "ImportError", "message": "cannot be loaded as a Python file", "line": 0}, []
    sys.modules[module_name] = module  # as in a run's child: a dataclass in the file finds its module
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        module.__spec__.loader.exec_module(module)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the file ends discovery, not the process
        return _describe(path, exc), []
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    # A run imports the file and takes its body by name: a body that is not a top-level name cannot run.
    here = [name for name, where in _state["declared"] if where == path]
    return None, [name for name in here if not callable(getattr(module, name, None))]


def _children() -> list[int]:
    """This process's children now (the supervisor names the file that left one running)."""
    found: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as children:
                found.extend(int(pid) for pid in children.read().split())
    except OSError:  # a kernel without the file: the supervisor names no file
        pass
    return sorted(found)


# prctl(2): the signal the kernel sends this process when the thread that started it ends (Linux), and SIGKILL's
# number there (no `signal` import: it costs start-up time).
PR_SET_PDEATHSIG = 1
SIGKILL = 9


def _die_with(supervisor: int) -> None:
    """If lifeguard dies without ending us (SIGKILL leaves it no cleanup), the kernel kills this process: a
    file stuck at import must not run on as an orphan. The supervisor starts us from the thread that waits
    for us, so that thread outlives us whenever lifeguard does."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's deadline and tree kill still hold
        return
    if os.getppid() != supervisor:  # it was gone before the line above
        os._exit(1)


def _read_request() -> protocol.DiscoveryRequest:
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    # Then stdin is empty, as for a run: a file that reads it at import gets EOF, not the request.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    unpatched.close(null)
    request: protocol.DiscoveryRequest = eval(b"".join(chunks).decode(), {"__builtins__": {}}, {})
    return request


def main() -> None:
    """Entry point: load every requested file in order, stop at the first that raises, report, exit at once
    (no atexit callback or finalization of what the files started may run)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if soft != 0:  # a crash at import leaves no core in the user's folder
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    request = _read_request()
    _die_with(request["supervisor"])
    _state.update(pid=os.getpid(), fd=request["records_fd"], declared=[])
    try:
        sys.path[:] = request["sys_path"]
        os.register_at_fork(after_in_child=_after_fork_in_child, after_in_parent=_after_fork_in_parent)
        for path in request["files"]:
            _state["loading"] = path
            _write(protocol.LOADING, path=path)
            error, unreachable = load(path)
            _write(protocol.LOADED, path=path, error=error, unreachable=unreachable, children=_children())
            if error is not None:
                break
        _write(protocol.DISCOVERY_DONE)
    except BaseException:
        import traceback

        _write(protocol.DISCOVERY_FAILED, error=traceback.format_exc())
        os._exit(1)
    os._exit(0)
