"""Fork-with-held-gil: MXNet's CustomOperator pool calls Python at fork and at exit.

MXNet ran custom operators' Python callbacks on a native worker pool. Its
pthread_atfork prepare handler stopped the pool, joining a worker that still
had a callback to run, while the forking thread held the GIL: os.fork() hung.
The pool's static destructor did the same after Python had finalized: the
process hung (or crashed) at exit. The review also found callbacks entering
Python from threads that never registered a thread state. One scenario each.
"""

from __future__ import annotations

import os
import select
import signal
import traceback
from types import ModuleType

import lifeguard
from lifeguard import child

# How long a scenario waits for the pool or a forked child before it gives up;
# well inside FORK_TIMEOUT, so a broken fixed variant fails instead of hanging.
BOUNDED_WAIT = 2.0
# Seconds before a run counts as hung. Every buggy fork run reaches it, so it
# stays small; a fixed run ends in about 0.1 s.
FORK_TIMEOUT = 5.0
EXIT_TIMEOUT = 5.0
CRASH_TIMEOUT = 5.0
CHILD_FAILED = 3  # exit status of a forked child whose check failed

assert BOUNDED_WAIT * 2 <= FORK_TIMEOUT, "the child and the parent wait in turn"


def _reap(pid: int, deadline: float) -> int:
    """Wait at most ``deadline`` seconds for ``pid``; kill it if it is still there.

    Returns the child's exit status, or raises AssertionError if it had to be killed.
    """
    pidfd = os.pidfd_open(pid)
    try:
        readable, _, _ = select.select([pidfd], [], [], deadline)
    finally:
        os.close(pidfd)
    if not readable:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError(f"forked child {pid} did not finish within {deadline} s")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _check_pool_in_child(fx: ModuleType, ran_before_fork: list[str]) -> None:
    """The forked child's whole life: the pool must work here too. Never returns."""
    status = CHILD_FAILED
    try:
        ran: list[str] = []
        fx.push(ran.append, "in child")
        idle = fx.wait(timeout=BOUNDED_WAIT)
        if idle and ran == ["in child"] and ran_before_fork == ["queued before fork"]:
            status = 0
        else:
            print(f"child: idle={idle} ran={ran} ran_before_fork={ran_before_fork}", flush=True)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


@lifeguard.scenario(
    fixture="fork_gil",
    # The forking thread holds the GIL inside fork(); the worker draining the
    # held callback waits for it in PyGILState_Ensure (3.10-3.12: for the GIL
    # itself, 3.13: already for the thread-state list lock, which
    # PyOS_BeforeFork holds across fork()).
    expect={"buggy": "hung@run", "fixed": "passed"},
    timeout=FORK_TIMEOUT,
    repeat={"buggy": 3, "fixed": 50},
)
def fork_with_pending_callback(fx: ModuleType) -> None:
    """os.fork() while a native worker still has a Python callback to run."""
    ran: list[str] = []
    fx.start(2)
    # The incident's unfinished async op: the callback is queued, not run, and
    # stays queued until the pool stops, so fork() always finds it pending.
    fx.hold()
    fx.push(ran.append, "queued before fork")
    pid = os.fork()  # buggy: hangs in the pool's pthread_atfork prepare handler
    if pid == 0:
        _check_pool_in_child(fx, ran)
    assert ran == ["queued before fork"], f"the pending callback ran {ran!r} before fork"
    in_parent: list[str] = []
    fx.push(in_parent.append, "in parent")
    assert fx.wait(timeout=BOUNDED_WAIT), "the parent's pool did not come back after fork"
    assert in_parent == ["in parent"], in_parent
    status = _reap(pid, BOUNDED_WAIT)
    assert status == 0, f"the forked child's pool check failed (exit status {status})"


@lifeguard.scenario(
    fixture="fork_gil",
    # The incident reported a hang at exit (its callbacks went through ctypes
    # on a 2019 CPython). On 3.10-3.13 the same shape crashes, every time: the
    # worker's PyGILState_Ensure after Py_Finalize finds no interpreter and
    # dereferences NULL in PyThreadState_New (3.10/3.11) or new_threadstate
    # (3.12/3.13), while the static destructor joins it.
    expect={"buggy": "crashed@exit", "fixed": "passed"},
    timeout=EXIT_TIMEOUT,
    repeat={"buggy": 3, "fixed": 50},
)
def exit_with_pending_callback(fx: ModuleType) -> None:
    """Return while a native worker still has a Python callback to run."""
    fx.start(1)
    fx.hold()
    # buggy: nothing stops the pool until exit() runs its static destructor,
    # after Py_Finalize, and the drained callback calls into a dead interpreter.
    fx.push(child.note, "the queued callback ran before finalization")
    assert fx.queued() == 1


def _pair(left: int, right: int) -> list[int]:
    return [left, right]


@lifeguard.scenario(
    fixture="fork_gil",
    # The thread state the interpreter reads is NULL (3.12+: a thread-local
    # nobody set; 3.10/3.11: the GIL holder's, and the caller released the GIL)
    # and the first frame push dereferences it: SIGSEGV on every version.
    expect={"buggy": "crashed@run", "fixed": "passed"},
    timeout=CRASH_TIMEOUT,
    repeat={"buggy": 10, "fixed": 50},
)
def callback_on_unregistered_thread(fx: ModuleType) -> None:
    """A native thread that never registered with Python calls a Python callback."""
    for number in range(3):
        assert fx.call_in_native_thread(_pair, number, 1) == [number, 1]
    try:
        fx.call_in_native_thread(int, "not a number")
    except ValueError:
        pass
    else:
        raise AssertionError("the callback's exception did not reach the caller")
