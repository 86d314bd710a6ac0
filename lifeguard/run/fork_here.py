"""Fork a run from this very process: the pytest plugin's fork mode (``pytest --lifeguard``).

The pytest process (or each pytest-xdist worker) is the warm server: it has imported pytest, the conftests
and the test module, and set up the test's fixtures, so a test costs a fork instead of an interpreter's
start-up and imports. The child becomes the run (lifeguard.child.forked_test) and ends through a real
process exit; everything after the fork is the supervision every run gets (supervise.supervise: deadline,
escalation ladder, tree kill, classification).
"""

from __future__ import annotations

import gc
import os
import posix
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from lifeguard.child import forked_test
from lifeguard.model.result import RunResult
from lifeguard.model.run import RunSpec
from lifeguard.proc.handles import ForkedChild
from lifeguard.run.containment import containment
from lifeguard.run.dumps import dump_where_interrupted
from lifeguard.run.launch import RunFiles, child_env, child_spec
from lifeguard.run.live import LiveOutput
from lifeguard.run.relay import Relays
from lifeguard.run.supervise import DEFAULT_OUTPUT_CAP, CaptureHook, MovingDeadline, starting, supervise

# Python 3.12+ warns of a fork of a multi-threaded process (a pytest-xdist worker runs its channel's thread): in
# the warnings summary of the test being run, or raised under -W error.
MULTI_THREADED_FORK = r".*is multi-threaded, use of fork\(\) may lead to deadlocks"
END_TIMEOUT = 5.0  # for a child killed outside supervision to be reaped (one in uninterruptible sleep is left)


def run_in_fork(spec: RunSpec, body: Callable[[], int], *, cancel: threading.Event | None = None,
                capture_hooks: tuple[CaptureHook, ...] = (), live: LiveOutput | None = None,
                own_streams: bool = False, meanwhile: Callable[[], None] | None = None,
                reuse: Path | None = None, moving: MovingDeadline | None = None) -> RunResult:
    """Fork, run ``body`` in the child (its return value is the exit code) and supervise the child to its
    end. Call it from the main thread: a fork copies only the calling thread. ``own_streams``: the child's
    sys.stdout and sys.stderr write to its relays (forked_test.become_run). ``meanwhile``: the caller's
    work done as the child starts (supervise). ``reuse``: a passed run's folder, emptied already
    (SessionRecord.spare), to make the run's folder of (RunFiles.create). ``moving``: a deadline that moves
    as the run goes (supervise.MovingDeadline)."""
    files, events_fd = RunFiles.create(spec.run_dir, reuse=reuse, emptied=True)
    relays = Relays(spec, files.stdout, files.stderr, DEFAULT_OUTPUT_CAP, live, pump_now=False)
    run_id = os.urandom(16).hex()
    # Tracked by ancestry, never by a cgroup: the child is ours, pytest runs one test at a time (every orphan
    # that comes to us while it lives is the run's), and moving a process into a cgroup after a pause costs
    # the kernel an RCU grace period (about 12 ms here), more than the whole rest of a forked test.
    guard = containment()
    membership = guard.for_run(run_id, by_ancestry=True)
    watchdog_fd = guard.watchdog.supervisor_fd()
    join = membership.join_file()
    env = child_env(spec, run_id, events_fd=events_fd)
    child = child_spec(spec)
    fds = (events_fd, *relays.child_ends)
    # A session that ignores SIGCHLD would have the kernel discard the child's exit status: the status is
    # kept while the child lives (the child itself ignores SIGCHLD again, as the test expects).
    sigchld_ignored = signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN
    handle: ForkedChild | None = None
    pid = 0
    with starting(membership, relays, events_fd):
        try:
            forked_test.hold_path_finders()
            # The collector is off across the fork, so the child freezes its inherited heap before any
            # collection can walk it (forked_test.become_run); each process turns it on again as it was.
            collector = gc.isenabled()
            gc.disable()
            try:
                if sigchld_ignored:
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                started = time.monotonic()
                with warnings.catch_warnings():  # lifeguard's own fork: the threads it leaves out are the harness's
                    warnings.filterwarnings("ignore", MULTI_THREADED_FORK, DeprecationWarning)
                    pid = posix.fork()  # the real one: a test's fixture may have patched os.fork
                if pid == 0:
                    forked_test.become_run(str(join) if join is not None else "", fds, env, child, body,
                                           own_streams=own_streams,
                                           watchdog=(watchdog_fd, run_id) if watchdog_fd is not None else None,
                                           collector=collector, sigchld_ignored=sigchld_ignored)
                handle = ForkedChild(pid)
            except BaseException:
                if sigchld_ignored:
                    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
                raise
            finally:
                if collector:
                    gc.enable()
            membership.started(pid)
        except BaseException as exc:
            if pid > 0:  # forked, not supervised yet (a Ctrl-C in between): never left running
                forked = handle or ForkedChild(pid)
                dump_where_interrupted(exc, spec, forked)
                forked.end(END_TIMEOUT)
            raise
    assert handle is not None  # (forked above, or raised)
    try:
        return supervise(spec, handle, membership, files, relays, started, cancel=cancel,
                         capture_hooks=capture_hooks, meanwhile=meanwhile, moving=moving)
    except BaseException as exc:
        # Nothing left to do once supervise ended it; else a Ctrl-C came before its watch began.
        dump_where_interrupted(exc, spec, handle)
        handle.end(END_TIMEOUT)
        raise
    finally:
        if sigchld_ignored:
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)
