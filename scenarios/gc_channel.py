"""Python's gc, run on a server thread, frees a Disco DRef mid-call: the channel's frames interleave.

The TVM Disco incident (apache/tvm#15996). Every `dref.session` went through the
FFI, which wraps the session in a NEW Python object each time. `DModule[name]`
then called `_get_cached_method` on that temporary object, whose
`hasattr(self, "_cache")` fell through to a native reflection lookup that
failed. Turning that failure into a Python exception (raise_last_ffi_error and
_append_traceback_frame) left frames that refer to themselves through a saved
traceback: frame -> traceback -> frame. The cycle keeps every frame of the
call chain alive, and with them the cached DPackedFunc, until the garbage
collector runs. When it runs on another thread than the session's owner, the
DPackedFunc's destructor writes its kill_reg frame into the channel while the
owner is writing a call_packed frame: the reader finds a frame inside a frame.

The fixture (fixtures_native/gc_channel) is the native half: sessions over a
real pipe with a frame-checking reader thread, and DRefs whose tp_dealloc
writes to it with the GIL released (TVM freed objects through ctypes). This
file holds the Python half, TVM's session.py and FFI error path reduced to
what the incident needs, in both versions: before the fix for the buggy build,
after it for the fixed build (`fx.FIXED`). The fix sets the session explicitly
on DPackedFunc and DModule and checks `self.__dict__` instead of `hasattr`, so
no temporary session, no failed lookup, no cycle and no late free; the fixed
build also writes each whole frame under a lock.
"""

from __future__ import annotations

import gc
import os
import re
import sysconfig
import threading
import time
import types
from collections.abc import Callable
from typing import Any, NoReturn

import lifeguard
from lifeguard import child

TIMEOUT = 10
# Deterministic form: the mid-frame handshake (fixtures_native/gc_channel/
# message_channel.h). The owner's streamed call frame stops after its header
# until the collector thread, which collects only once the frame is paused,
# has shown up: its DRef destructor's kill_reg is in the pipe (buggy), or is
# waiting for the whole-frame lock (fixed native half), or its collection
# ended having freed nothing (fixed Python half). A timed pause here (it was
# 20 ms) let the collector in "usually": with both cores busy it missed, and
# a buggy run passed. The handshake needs no luck; the deadline only bounds a
# broken one, which then fails the run with a message saying so.
HANDSHAKE_SECONDS = 2.0
# Each round leaves a new cycle for the collector and pauses one call frame
# for it: the buggy channel is corrupted in the first round already; the
# later rounds show the fixed build keeping the collection out every time.
DETERMINISTIC_ROUNDS = 3
# Large enough to be streamed in pieces rather than written atomically.
CALL_PAYLOAD_BYTES = 64 * 1024
# Stochastic form: no pause at all; many large calls while a thread collects.
STOCHASTIC_BUDGET_SECONDS = 0.2
STOCHASTIC_MAX_CALLS = 400
STOCHASTIC_PAYLOAD_BYTES = 256 * 1024
THREAD_JOIN_SECONDS = 3.0
SHUTDOWN_SECONDS = 3.0
# A stuck thread or reader must fail the run before lifeguard calls it hung.
assert THREAD_JOIN_SECONDS + SHUTDOWN_SECONDS < TIMEOUT
# A broken handshake must fail with its own message: the collector gives up
# waiting for a paused frame before the owner gives up waiting for the
# collection, and a pause that times out, then the cleanup's joins, still end
# the run before lifeguard calls it hung.
assert HANDSHAKE_SECONDS < THREAD_JOIN_SECONDS
assert HANDSHAKE_SECONDS + THREAD_JOIN_SECONDS + SHUTDOWN_SECONDS < TIMEOUT

# The FFI error prefixes TVM maps to Python exception types (base.py ERROR_TYPE).
ERROR_TYPES: dict[str, type[Exception]] = {
    "AttributeError": AttributeError,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
}
_BACKTRACE_FRAME = re.compile(r"^\s*\d+: (?P<function>.+)\n\s+at (?P<file>[^:\n]+):(?P<line>\d+)$", re.M)


def _append_traceback_frame(tb: types.TracebackType | None, function: str, filename: str,
                            lineno: int) -> types.TracebackType:
    """Add a native frame to a traceback the way TVM's base.py did: run a dummy function.

    `dummy_tb` keeps the traceback of this very frame, so this frame refers to
    itself: the first link of the incident's cycle.
    """
    code = compile("\n" * (lineno - 1) + "def dummy_func(): raise NotImplementedError()", filename, "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    dummy_func = namespace["dummy_func"]
    dummy_func.__code__ = dummy_func.__code__.replace(co_name=function)
    dummy_tb = None
    try:
        dummy_func()
    except NotImplementedError as err:
        dummy_tb = err.__traceback__
    assert dummy_tb is not None and dummy_tb.tb_next is not None
    new_frame = dummy_tb.tb_next
    return types.TracebackType(tb, new_frame.tb_frame, new_frame.tb_lasti, new_frame.tb_lineno)


def raise_last_ffi_error(message: str, backtrace: str) -> NoReturn:
    """Re-raise a native failure as TVM's raise_last_ffi_error did, native frames included.

    `py_err` is a local of this frame and its traceback holds this frame: the
    second cycle. Both outlive the exception once hasattr() swallows it.
    """
    error_type, _, text = message.partition(": ")
    py_err: BaseException = ERROR_TYPES.get(error_type, RuntimeError)(text or message)
    tb = py_err.__traceback__
    for match in _BACKTRACE_FRAME.finditer(backtrace):
        tb = _append_traceback_frame(tb, match["function"], match["file"], int(match["line"]))
    py_err = py_err.with_traceback(tb)
    raise py_err


def load_disco(fx: Any) -> types.SimpleNamespace:
    """TVM's disco/session.py over the fixture: before the fix in a buggy build, after it in a fixed one."""
    explicit_session = bool(fx.FIXED)

    def ffi_call(native: Callable[..., Any], *args: Any) -> Any:
        # TVM's ctypes FFI: `if _LIB.TVMFuncCall(...) != 0: raise_last_ffi_error()`.
        try:
            return native(*args)
        except fx.FFIError as error:
            message, backtrace = str(error), getattr(error, "backtrace", "")
        raise_last_ffi_error(message, backtrace)

    class Object:
        """tvm.runtime.Object: attributes Python does not know are looked up natively."""

        __slots__ = ()

        def __getattr__(self, name: str) -> Any:
            try:
                return ffi_call(fx.node_get_attr, self, name)
            except AttributeError:
                raise AttributeError(f"{type(self)} has no attribute {name}") from None

    class DRef(Object, fx.DRef):
        """A register on every worker; freeing it sends kill_reg on the session's channel."""

        if not explicit_session:
            # Before the fix: the FFI wraps the session in a new object on every access.
            @property
            def session(self) -> Session:
                return ffi_call(fx.dref_session, self)

    class DPackedFunc(DRef):
        """A function on the workers."""

        def __init__(self, dref: DRef, session: Session) -> None:
            self._move_from(dref)  # TVM: self.handle = dref.handle; dref.handle = None
            if explicit_session:
                self.session = session  # the fix: no temporary session object

        def __call__(self, *args: Any) -> DRef:
            return self.session.call_packed(self, *args)

    class DModule(DRef):
        """A module loaded on the workers."""

        def __init__(self, dref: DRef, session: Session) -> None:
            self._move_from(dref)
            if explicit_session:
                self.session = session

        def __getitem__(self, name: str) -> DPackedFunc:
            func = self.session._get_cached_method("runtime.ModuleGetFunction")
            return DPackedFunc(func(self, name, False), self.session)

    class Session(Object, fx.Session):
        """A Disco session: the controller's end of the channel to the workers."""

        def _get_cached_method(self, name: str) -> DPackedFunc:
            if explicit_session:
                has_cache = "_cache" in self.__dict__  # the fix: nothing native can fail here
            else:
                # Misses on a fresh session object, falls back to __getattr__,
                # the native lookup fails, and the error leaves its cycle.
                has_cache = hasattr(self, "_cache")
            if not has_cache:
                cache = self._cache = {}
            else:
                cache = self._cache
            if name not in cache:
                func = cache[name] = self.get_global_func(name)
            else:
                func = cache[name]
            return func

        def get_global_func(self, name: str) -> DPackedFunc:
            return DPackedFunc(ffi_call(fx.session_get_global_func, self, name), self)

        def call_packed(self, func: DRef, *args: Any) -> DRef:
            return ffi_call(fx.session_call_packed, self, func, *args)

        def load_vm_module(self, path: str) -> DModule:
            func = self._get_cached_method("runtime.disco.load_vm_module")
            return DModule(func(path, None), self)

        def shutdown(self, timeout: float) -> dict[str, Any]:
            return ffi_call(fx.session_shutdown, self, timeout)

    fx.register_object("runtime.disco.DRef", DRef)
    fx.register_object("runtime.disco.Session", Session)

    def create_session(handshake_seconds: float = 0.0) -> Session:
        return ffi_call(fx.session_create, 0, handshake_seconds)  # no timed window: write_window_us=0

    return types.SimpleNamespace(create_session=create_session, Session=Session, DRef=DRef)


def _report_channel(report: dict[str, Any], calls_made: int) -> None:
    """Pass the reader's verdict on the channel to lifeguard."""
    child.note(
        f"channel: {report['frames']} valid frames ({report['calls']} calls, {report['kills']} kill_reg), "
        f"{report['bytes']} bytes, {report['dropped_after_shutdown']} frames dropped after shutdown"
    )
    if report["corrupted"]:
        child.report_corruption(report["message"], data=report["evidence"])
    elif report["calls"] != calls_made:
        raise AssertionError(f"the reader saw {report['calls']} call frames, {calls_made} were sent")


class ServerCollector:
    """The inference server's housekeeping thread: it runs gc.collect() when asked.

    The deterministic test's hook: when asked, it collects only once the owner
    has paused a call frame after its header (``wait_for_pause``), and ends that
    pause when its collection is over (``end_pause``). Without the hook, when the
    collection came was the scheduler's choice.
    """

    def __init__(self, wait_for_pause: Callable[[float], bool], end_pause: Callable[[], bool]) -> None:
        self._wait_for_pause = wait_for_pause
        self._end_pause = end_pause
        self._requested = threading.Event()
        self._finished = threading.Event()
        self._failure: str | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="gc-collector", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            if not self._requested.wait(THREAD_JOIN_SECONDS):
                return  # nobody asks any more: never outlive the run
            self._requested.clear()
            if self._stopping:
                return
            # Waits with the GIL released: the owner's frame is paused in native code.
            if not self._wait_for_pause(HANDSHAKE_SECONDS):
                self._failure = (f"mid-frame handshake broken: no call frame paused after its header within "
                                 f"{HANDSHAKE_SECONDS} s, so the collector never collected mid-call")
            else:
                try:
                    gc.collect()  # before the fix: frees the DPackedFunc, whose kill_reg goes mid-frame
                finally:
                    # The pause may have ended already (the kill_reg landed, or met
                    # the lock); if nothing was freed, this is what lets the owner on.
                    self._end_pause()
            self._finished.set()

    def collect_soon(self) -> None:
        """Ask for a collection; it starts once the owner's call frame is paused mid-frame."""
        self._finished.clear()
        self._requested.set()

    def wait_collected(self) -> None:
        if not self._finished.wait(THREAD_JOIN_SECONDS):
            raise TimeoutError("the collector thread did not finish its collection")
        if self._failure is not None:
            raise TimeoutError(self._failure)

    def stop(self) -> None:
        self._stopping = True
        self._requested.set()
        self._thread.join(THREAD_JOIN_SECONDS)
        if self._thread.is_alive():
            raise TimeoutError("the collector thread did not stop")


def _check_handshake(fx: Any, report: dict[str, Any]) -> None:
    """Fail a run whose handshake did not happen, where the channel's verdict would hide it.

    A pause that timed out already raised from the call. This catches the quiet
    case: a buggy build whose collector collected mid-frame but freed no DRef
    there (no cycle, or another thread freed it first) would pass like the
    fixed build. A corrupted channel is reported as what it is.
    """
    handshake = report["handshake"]
    child.note("handshake: {pauses} frames paused after their header; ended by another thread's frame landing "
               "{landed}, by the whole-frame lock holding one back {held_back}, by a collection freeing nothing "
               "{released}, by the deadline {timed_out}".format(**handshake))
    if handshake["pauses"] != DETERMINISTIC_ROUNDS or handshake["timed_out"]:
        raise AssertionError(f"mid-frame handshake broken: {handshake['pauses']} call frames paused "
                             f"({DETERMINISTIC_ROUNDS} expected), {handshake['timed_out']} of them timed out")
    if not fx.FIXED and not report["corrupted"]:
        raise AssertionError(
            f"mid-frame handshake broken: the collector collected during {handshake['pauses']} paused call frames, "
            f"but no DRef destructor's kill_reg landed in one ({handshake['landed']} landed, "
            f"{handshake['released']} collections freed nothing there): the collector never freed the DRef "
            f"mid-call, so this buggy run shows nothing")


@lifeguard.scenario(
    fixture="gc_channel",
    expect={"buggy": "corrupted@run", "fixed": "passed"},
    timeout=TIMEOUT,
    repeat={"buggy": 20, "fixed": 50},
    fork_server=True,  # nothing here lives in the exit phase: runs may be forked from a warm server
)
def gc_thread_frees_dref_mid_call(fx: Any) -> None:
    """A collector thread frees a cached DPackedFunc while the owner writes a call: frames interleave."""
    disco = load_disco(fx)
    # The collector thread is the only one that collects, as in a server that
    # disables automatic gc and collects from a housekeeping thread; no
    # collection can free the DPackedFunc earlier on the owner thread.
    gc.disable()
    # Same program in both builds: every round's call pauses after its header
    # and the collector collects during the pause. What differs is the fixed
    # code itself: its Python half leaves no cycle, so the collection frees
    # nothing and ends the pause (and were a DRef freed, its kill_reg would meet
    # the whole-frame lock, which also ends the pause, and wait for the frame):
    # no pause of the fixed build waits out the deadline.
    session = disco.create_session(handshake_seconds=HANDSHAKE_SECONDS)
    collector = ServerCollector(lambda timeout: fx.session_wait_mid_frame(session, timeout),
                                lambda: fx.session_release_mid_frame(session))
    calls_made = 0
    try:
        module = session.load_vm_module("model.so")
        calls_made += 1
        payload = bytes(range(256)) * (CALL_PAYLOAD_BYTES // 256)
        for _ in range(DETERMINISTIC_ROUNDS):
            # Before the fix this lookup leaves a cycle that owns the cached
            # ModuleGetFunction DPackedFunc of a temporary session object.
            forward = module["forward"]
            calls_made += 1
            collector.collect_soon()
            # The owner releases the GIL to write the call frame and pauses
            # after its header; the collector collects then, and before the fix
            # the DPackedFunc's kill_reg lands inside the frame. A pause nobody
            # ends raises TimeoutError here (the handshake is broken).
            forward(payload)
            calls_made += 1
            collector.wait_collected()
    finally:
        collector.stop()
        report = session.shutdown(SHUTDOWN_SECONDS)
        gc.enable()
    _check_handshake(fx, report)
    _report_channel(report, calls_made)


def _owner_streams_calls_beside(fx: Any, side_work: Callable[[threading.Event], None], thread_name: str,
                                budget_seconds: float, payload_bytes: int) -> None:
    """The owner thread streams large calls for ``budget_seconds`` while ``side_work`` runs
    on a second thread (until the event is set); then the channel's verdict is reported."""
    disco = load_disco(fx)
    session = disco.create_session()
    stop = threading.Event()
    worker = threading.Thread(target=side_work, args=(stop,), name=thread_name, daemon=True)
    calls_made = 0
    try:
        module = session.load_vm_module("model.so")
        calls_made += 1
        payload = bytes(range(256)) * (payload_bytes // 256)
        worker.start()
        deadline = time.monotonic() + budget_seconds
        while calls_made < STOCHASTIC_MAX_CALLS and time.monotonic() < deadline:
            forward = module["forward"]  # one more cycle per request before the fix
            child.hook_point()
            forward(payload)
            calls_made += 2
    finally:
        stop.set()
        worker.join(THREAD_JOIN_SECONDS)
        report = session.shutdown(SHUTDOWN_SECONDS)
    if worker.is_alive():
        raise TimeoutError(f"the {thread_name} thread did not stop")
    _report_channel(report, calls_made)


@lifeguard.scenario(
    fixture="gc_channel",
    expect={"buggy": "sometimes:corrupted@run", "fixed": "passed"},
    timeout=TIMEOUT,
    repeat={"buggy": 50, "fixed": 50},
    fork_server=True,
)
def gc_thread_races_owner_calls(fx: Any) -> None:
    """No pause anywhere: a thread collects in a loop while the owner streams large calls."""

    def collect_until_stopped(stop: threading.Event) -> None:
        while not stop.is_set():
            gc.collect()

    _owner_streams_calls_beside(fx, collect_until_stopped, "gc-collector", STOCHASTIC_BUDGET_SECONDS,
                                STOCHASTIC_PAYLOAD_BYTES)


# The server form: nobody calls gc.collect(); the interpreter collects when
# allocations cross its thresholds, on whichever thread allocates. Rare by
# itself; the gc-thread and gc-aggressive perturbations make it frequent. Always
# a fresh interpreter: a fork-server child starts with its heap frozen
# (gc.freeze), which changes when automatic collections come (on 3.13 they
# hardly came at all: 0 corrupted runs in 50).
SERVER_BUDGET_SECONDS = 0.2
SERVER_PAYLOAD_BYTES = 64 * 1024
# Requests per batch on the request thread: more allocations, more collections
# there. The default reproduces in most runs (a dependable bundled series); the
# perturbation benchmark lowers it (rare without perturbations) through the env.
REQUEST_BATCH = int(os.environ.get("GC_CHANNEL_REQUEST_BATCH", "256"))
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@lifeguard.scenario(
    fixture="gc_channel",
    expect={"buggy": "sometimes:corrupted@run", "fixed": "passed"},
    timeout=TIMEOUT,
    repeat={"buggy": 50, "fixed": 50},
)
def request_thread_collects_by_chance(fx: Any) -> None:
    """A request thread allocates (and so collects, now and then) while the owner streams calls."""

    def handle_requests(stop: threading.Event) -> None:
        # Short-lived containers, as request parsing makes: they move the allocation counter that starts
        # automatic collections on this thread. A free-threaded build's counter is net of frees, so there
        # each request also holds its parser (a cycle, freed by a collection only): without it, 0
        # corrupted runs in 50 there.
        while not stop.is_set():
            requests = [{"id": n, "tokens": [n, n + 1]} for n in range(REQUEST_BATCH)]
            if FREE_THREADED:
                for request in requests:
                    request["parser"] = request
            del requests
            child.hook_point()

    _owner_streams_calls_beside(fx, handle_requests, "request-handler", SERVER_BUDGET_SECONDS, SERVER_PAYLOAD_BYTES)
