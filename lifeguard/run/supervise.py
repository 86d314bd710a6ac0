"""Supervise one run: the one subprocess recipe the CLI, the plugin and the tests share.

Every run gets a fresh child of the real interpreter binary (childproc), in its
own session and working directory, with output in size-capped files, a result
channel and a deadline. On expiry the escalation ladder runs: native capture
hooks (gdb) -> faulthandler dump of every Python process of the tree -> SIGKILL
of the whole tree, orphans included. Every wait is bounded; the supervisor never
hangs. What the run ended in is worked out by classify, and a failed run's
evidence completed by explain.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lifeguard.child import event_marker
from lifeguard.child.protocol import BODY_START, SPEC_ENV
from lifeguard.errors import UsageError
from lifeguard.model.outcomes import Phase
from lifeguard.model.result import Leftover, RunResult
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.proc.handles import ForkedChild, PopenHandle
from lifeguard.proc.membership import RunMembership
from lifeguard.proc.procfs import core_dumping, oom_kill_count, read_proc
from lifeguard.run import headstart
from lifeguard.run.channel import read_events
from lifeguard.run.classify import classify, lead_pid, phase_of
from lifeguard.run.containment import containment, spawn, starts_python
from lifeguard.run.dumps import DUMP_TIMEOUT, Waitable, dump_python_stacks, dump_where_interrupted
from lifeguard.run.launch import RunFiles, child_argv, child_env, precompile_child_side, raise_core_limit, spec_env
from lifeguard.run.live import LiveOutput
from lifeguard.run.parked import ParkedCrashes
from lifeguard.run.relay import Relays
from lifeguard.run.stillness import Stillness

if TYPE_CHECKING:  # stacks are read only for a run that failed: a passing session never imports them
    from lifeguard.model.stacks import ProcessStacks

# How often the wait loop wakes to watch output size and cancellation.
POLL_INTERVAL = 0.25
# A grandchild may still be exiting when the main child is gone: grace before
# calling it a leftover.
LEFTOVER_GRACE = 0.2
DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024
# Everything after a hang's deadline, whatever the process count or a tool that hangs: native capture,
# faulthandler dumps and the kill. A run therefore ends within its timeout + CAPTURE_BUDGET.
CAPTURE_BUDGET = 30.0
KILL_BUDGET = 3.0  # the tree kill and reap after the capture (cgroup.kill settles in milliseconds)
NATIVE_BUDGET = CAPTURE_BUDGET - DUMP_TIMEOUT - KILL_BUDGET
assert NATIVE_BUDGET > 0
# A run's process found dying of a crash at its deadline (its core being written, or its parked crash just sent
# its signal back): how much longer it may take to end, read as the crash it is rather than a hang.
DEATH_GRACE = 10.0
# A run whose deadline counts from its body's start (RunSpec.deadline_from_body): how long its start-up
# (interpreter, imports) may take, and how often the result channel is read for the body's start meanwhile.
STARTUP_TIMEOUT = 60.0
BODY_START_POLL = 0.005


# A run whose deadline moves as it goes (a group of forked tests: each test's start + its timeout): given the
# run's own deadline, the one in force now (time.monotonic()).
MovingDeadline = Callable[[float], float]


class RunInterrupted(Exception):
    """The run was cancelled (Ctrl-C); its tree has been killed."""


@dataclass
class HangContext:
    """What a native capture hook receives when a run's deadline passes (before any
    faulthandler dump: see supervise). It must be done by ``deadline`` (time.monotonic()) and stop
    early once ``cancel`` is set, saying what it did not read."""

    spec: RunSpec
    pids: list[int]
    deadline: float = float("inf")
    cancel: threading.Event | None = None
    thorough: bool = False  # a crash parked in one process: frames left unnamed are worth gdb's slower read


class CaptureHook(Protocol):
    """Native capture at a hang's deadline (lifeguard.capture.native): the stacks of every live process."""

    def __call__(self, context: HangContext) -> list[ProcessStacks]: ...


class ChildHandle(Waitable, Protocol):
    """A started run's main process, however it was started (spawned, or forked by a server)."""

    @property
    def returncode(self) -> int | None: ...

    # Once exited: why its exit status is unknown (collected by something else), else None.
    lost: str | None

    def reap(self, timeout: float) -> None:
        """Collect the exit status after a kill (bounded)."""
        ...


def _wait_exit(handle: ChildHandle, membership: RunMembership, deadline: float,
               cancel: threading.Event | None, stillness: Stillness | None = None,
               parked: ParkedCrashes | None = None, moving: MovingDeadline | None = None) -> bool:
    """Wait for the child until the deadline (``moving``'s, when given), or until ``stillness`` says the tree
    hangs; True if it exited. Its zombie orphans are reaped as they come, its parked crashes read and ended."""
    own = deadline
    dying_until: float | None = None
    while True:
        if moving is not None:
            deadline = moving(own)
        if dying_until is not None:
            deadline = dying_until
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if handle.wait_step(0):
                return True
            if dying_until is None and _dying(handle.pid, parked):
                dying_until = time.monotonic() + DEATH_GRACE
                continue
            return False
        if cancel is not None and cancel.is_set():
            raise RunInterrupted()
        if handle.wait_step(min(remaining, POLL_INTERVAL)):
            return True
        membership.watch()
        if parked is not None:
            parked.look(membership.members())
        containment().revive_watchdog()
        if stillness is not None and stillness.hung(membership.members()):
            return handle.wait_step(0)


def _dying(pid: int, parked: ParkedCrashes | None) -> bool:
    """Is the run's process ending by a crash already: its parked crash sent back, or its core being written?
    (A slow stack read or a big core can outlast a short deadline; that process crashed, it did not hang.)"""
    return (parked is not None and pid in parked.ended) or core_dumping(pid)


def _body_start_deadline(spec: RunSpec, handle: ChildHandle, membership: RunMembership, events: Path,
                         started: float, cancel: threading.Event | None) -> tuple[float, bool]:
    """For a run whose deadline counts from its body: wait (at most STARTUP_TIMEOUT) until the body starts;
    the deadline then is that moment + the timeout. Returns (deadline, whether start-up overran its bound)."""
    marker = event_marker(BODY_START)
    limit = started + STARTUP_TIMEOUT
    offset = 0
    while time.monotonic() < limit:
        if cancel is not None and cancel.is_set():
            raise RunInterrupted()
        position = max(0, offset - len(marker))  # a marker cut by the last look is read whole now
        try:
            with open(events, "rb") as f:  # the channel only grows: read what is new since the last look
                f.seek(position)
                chunk = f.read()
        except OSError:
            chunk = b""
        if marker in chunk:
            return time.monotonic() + spec.timeout, False
        offset = position + len(chunk)
        if handle.wait_step(BODY_START_POLL):
            return time.monotonic(), False  # ended before its body started: nothing to wait for
        membership.watch()
    return limit, True


@contextmanager
def starting(membership: RunMembership, relays: Relays, events_fd: int) -> Iterator[None]:
    """Around the start of a run's main process, however it starts (spawned, forked by the server, forked
    here): if the start fails, the run's membership and relays are closed; either way our copy of the result
    channel is closed and the relays are told the child has its ends."""
    try:
        yield
    except BaseException:
        membership.close()
        relays.close()
        raise
    finally:
        os.close(events_fd)
        relays.started()


def run_once(spec: RunSpec, *, cancel: threading.Event | None = None,
             capture_hooks: tuple[CaptureHook, ...] = (),
             output_cap: int = DEFAULT_OUTPUT_CAP, live: LiveOutput | None = None,
             meanwhile: Callable[[], None] | None = None, reuse: Path | None = None) -> RunResult:
    """Run ``spec`` in a fresh child and return its classified result (its output handed to ``live``
    as it comes, when given). ``meanwhile``: the caller's own work, done while the child starts (supervise);
    ``reuse``: a passed run's folder, emptied already, to become this run's (lifeguard.run.spares)."""
    precompile_child_side(spec.interpreter.executable, spec.interpreter.version)
    if spec.kind is RunKind.COMMAND and headstart.pending() is not None:
        result = _from_head_start(spec, cancel=cancel, capture_hooks=capture_hooks, output_cap=output_cap,
                                  live=live)
        if result is not None:
            if reuse is not None:  # its folder was made before lifeguard's imports: the spare is not needed
                shutil.rmtree(reuse, ignore_errors=True)
            return result
    files, events_fd = RunFiles.create(spec.run_dir, reuse=reuse, emptied=True)
    relays = Relays(spec, files.stdout, files.stderr, output_cap, live, pump_now=False)
    out_fd, err_fd = relays.child_ends
    run_id = os.urandom(16).hex()
    env = dict(os.environ)
    env.update(child_env(spec, run_id, events_fd=events_fd))
    if spec.kind is not RunKind.COMMAND:  # a command gets no bootstrap: its Python processes attach
        env[SPEC_ENV] = spec_env(spec)
    membership = containment().for_run(run_id)
    env.update(membership.child_env())
    argv = child_argv(spec)
    # A Python child waits for its cgroup before running anything of the run's (child.joined), so it is moved
    # while its interpreter starts; any other program is made a member before exec (it may fork at once).
    later = spec.kind is not RunKind.COMMAND or starts_python(argv[0], env)
    bootstrap_in_cgroup = spec.kind is not RunKind.COMMAND and membership.join_file() is not None
    started = time.monotonic()
    with starting(membership, relays, events_fd):
        try:
            proc = spawn(
                argv, None if later else membership.join_file(), waits_for_cgroup=bootstrap_in_cgroup,
                cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_fd, stderr=err_fd, pass_fds=(events_fd,),
            )
        except OSError as exc:  # a command that is not there, not executable, or a folder that went away
            raise UsageError(f"cannot start {argv[0]!r} in {spec.cwd}: {exc.strerror or exc}") from None
        if later:
            try:
                raise_core_limit(spec, proc.pid)  # before the child may go on (it waits to be adopted)
                membership.adopt(proc.pid)
            except BaseException:  # not in the run's folder: nothing else would end it
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=KILL_BUDGET)
                raise
        else:
            membership.started(proc.pid)
    return supervise(spec, PopenHandle(proc), membership, files, relays, started, cancel=cancel,
                     capture_hooks=capture_hooks, meanwhile=meanwhile)


def _from_head_start(spec: RunSpec, *, cancel: threading.Event | None, capture_hooks: tuple[CaptureHook, ...],
                     output_cap: int, live: LiveOutput | None) -> RunResult | None:
    """Supervise the command started ahead of lifeguard's imports (lifeguard.run.headstart), if it is the very
    process this start would start; None when it is not (it is killed, and the run starts as usual). Tracked
    by ancestry: it was started before the session's cgroup existed."""
    head = headstart.pending()
    if head is None:
        return None
    membership = containment().for_run(head.run_id, by_ancestry=True)
    env = dict(os.environ)
    env.update(child_env(spec, head.run_id, events_fd=head.events_fd))
    env.update(membership.child_env())
    if headstart.claim(child_argv(spec), str(spec.cwd), env) is None:
        membership.close()
        return None
    files = RunFiles.existing(spec.run_dir)
    relays = Relays(spec, files.stdout, files.stderr, output_cap, live,
                    pipes=((head.out_read, head.out_write), (head.err_read, head.err_write)))
    events_fd = head.events_fd
    head.events_fd = head.out_read = head.out_write = head.err_read = head.err_write = -1  # the relays' now
    with starting(membership, relays, events_fd):
        membership.started(head.pid)
    return supervise(spec, ForkedChild(head.pid), membership, files, relays, head.started, cancel=cancel,
                     capture_hooks=capture_hooks)


def supervise(spec: RunSpec, handle: ChildHandle, membership: RunMembership, files: RunFiles, relays: Relays,
              started: float, *, cancel: threading.Event | None = None,
              capture_hooks: tuple[CaptureHook, ...] = (), meanwhile: Callable[[], None] | None = None,
              moving: MovingDeadline | None = None) -> RunResult:
    """Watch a started run to its end: deadline (or a MovingDeadline), escalation ladder, leftovers, verdict
    data. ``meanwhile``: the caller's own work, done first, while the run's child starts (on another core)."""
    # Our own look at the result channel, open for the whole run: a run that deletes its folder (a body that
    # cleans its working directory) does not take away the events its outcome rests on.
    try:
        channel = os.open(files.events, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        channel = -1
    try:
        return _supervise(spec, handle, membership, files, relays, started, cancel=cancel,
                          capture_hooks=capture_hooks, meanwhile=meanwhile, moving=moving,
                          channel=Path(f"/proc/self/fd/{channel}") if channel >= 0 else files.events)
    finally:
        if channel >= 0:
            os.close(channel)


def _supervise(spec: RunSpec, handle: ChildHandle, membership: RunMembership, files: RunFiles, relays: Relays,
               started: float, *, cancel: threading.Event | None, capture_hooks: tuple[CaptureHook, ...],
               meanwhile: Callable[[], None] | None, moving: MovingDeadline | None, channel: Path) -> RunResult:
    python_stacks: dict[str, str] = {}
    backtraces: list[ProcessStacks] = []
    leftovers: list[Leftover] = []
    notes: list[str] = []
    hung = False
    hung_pids: list[int] = []
    phase_at_deadline: Phase | None = None
    ended_early: float | None = None
    interrupted = False
    oom_before = oom_kill_count()
    try:
        if meanwhile is not None:
            meanwhile()
        # The pump thread starts after the caller's own work: started with the child, it took the child's core
        # for a few hundred microseconds of a forked test's start (three threads on two cores).
        relays.pump()
        deadline = started + spec.timeout
        if spec.deadline_from_body:
            deadline, overran = _body_start_deadline(spec, handle, membership, files.events, started, cancel)
            if overran:
                notes.append(f"start-up (the interpreter and the imports before the body) took longer than "
                             f"{STARTUP_TIMEOUT:g} s, its own bound: the body never started")
        stillness = Stillness(spec.hang_settle, (files.stdout, files.stderr, files.events)) \
            if spec.hang_settle is not None else None
        parked = None
        if spec.parks_crashes and capture_hooks:  # its crashes park (lifeguard.child.crash_park): read here
            parked = ParkedCrashes(lambda pids: _capture(capture_hooks, HangContext(
                spec, pids, deadline=time.monotonic() + NATIVE_BUDGET, cancel=cancel, thorough=True), notes),
                main=handle.pid)
        exited = _wait_exit(handle, membership, deadline, cancel, stillness, parked, moving)
        if not exited:
            hung = True
            if stillness is not None and stillness.ended:
                ended_early = stillness.settle
            hung_pids = membership.members()
            # The phase is what the tree was doing at the deadline: the dump
            # signal below may interrupt a blocking call and let the body move on.
            events = read_events(files.events)
            phase_at_deadline = phase_of(events, lead_pid(events, handle.pid))
            # Native capture first: the dump signal interrupts blocking calls (a join
            # wakes up and queues for the GIL), which would change the very deadlock
            # gdb is about to show. The faulthandler dumps come right after.
            context = HangContext(spec, hung_pids, deadline=time.monotonic() + NATIVE_BUDGET, cancel=cancel)
            backtraces.extend(_capture(capture_hooks, context, notes))
            python_stacks = dump_python_stacks(hung_pids, files.run_dir)
        else:
            left = _leftovers(handle, membership)
            if left:
                if parked is not None:  # a forked child parked as the main process ended: ended here
                    parked.look(left)
                time.sleep(LEFTOVER_GRACE)
                left = _leftovers(handle, membership)
            for pid in left:
                info = read_proc(pid)
                leftovers.append(Leftover(pid, info.comm if info else "?", info.ppid if info else None,
                                          info.state if info else ""))
        if parked is not None:
            backtraces.extend(parked.stacks)
    except BaseException as exc:  # cancelled, Ctrl-C in this thread, or our own bug: never leave the tree behind
        interrupted = True
        dump_where_interrupted(exc, spec, handle)
        raise
    finally:
        try:
            if hung or leftovers or interrupted:
                membership.kill()
                handle.reap(timeout=5)
        finally:
            membership.close()
            relays.close()  # every writer is gone now: the output files are complete
    duration = time.monotonic() - started
    oom_after = oom_kill_count()
    return classify(spec, files, handle.pid, None if hung else handle.returncode, duration, hung=hung,
                    status_lost=None if hung else handle.lost, hung_pids=hung_pids, python_stacks=python_stacks,
                    backtraces=backtraces, leftovers=leftovers, phase_at_deadline=phase_at_deadline,
                    notes=tuple(notes), ended_early=ended_early, channel=channel,
                    oom_kills=oom_after - oom_before if oom_before is not None and oom_after is not None else 0)


def _capture(hooks: tuple[CaptureHook, ...], context: HangContext, notes: list[str]) -> list[ProcessStacks]:
    """The native stacks of ``context.pids`` from every hook; a hook's failure is a note, never the run's loss."""
    stacks: list[ProcessStacks] = []
    for hook in hooks:
        try:
            stacks.extend(hook(context))
        except Exception as exc:
            notes.append(f"native capture failed: {exc!r}")
    return stacks


def _leftovers(handle: ChildHandle, membership: RunMembership) -> list[int]:
    """Live members of a run whose main process has exited."""
    return [pid for pid in membership.members() if pid != handle.pid]


