"""A fatal signal in a plain target's body waits in place until lifeguard has read the stacks.

A plain target runs in the user's folder, where no core may land, so its cores are off until finalization
(lifeguard.child.cores). Without this, a crash in its body (a library's worker thread faulting, an abort)
had no native stack. Here each fatal signal's disposition becomes libc's ``sleep`` itself, with
``SA_RESETHAND | SA_NODEFER``: the crashing thread sleeps ``signum`` seconds (4 to 11) inside the handler,
its stack intact, and the disposition is back to the default. The supervisor sees the process's caught
signals change and a thread asleep under a signal frame, reads every thread's stacks and sends the same signal
to that thread: the process dies of it, as the kernel reports. If nobody does, the sleep ends, the fault
runs again with the default disposition, and the process dies of it a few seconds late.

A process forked while its parent ran other threads parks SIGTERM as well (``install_termination``), where
nothing handles it: a library whose worker threads stayed in the parent may end such a child with it, and only
the child's stack says which library and call. The handler then also gets the signal's information
(``SA_SIGINFO``), from which the supervisor reads who sent it; a SIGTERM from anyone else it passes on at once.
Unlike a fault, a SIGTERM nobody passes on is gone when the sleep ends: only a supervised run parks it.

faulthandler stays in front (disabled and enabled again around the change): it dumps the Python stacks and
then re-raises into the sleep. At finalization the default dispositions come back (``at_finalization``:
from there on cores land in the run folder and say more, a fault address included).
"""

import faulthandler
import os
import sys

from lifeguard.child import protocol

# typing and collections cost every run's start-up, and the objects they leave are finalized at every exit
# (benchmarks/fidelity.py: the exit race crashed in 2-4 of 100 runs under lifeguard with them, 10-15 without).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SA_SIGINFO = 0x4
SA_NODEFER = 0x40000000
SA_RESETHAND = 0x80000000
# struct sigaction of glibc on 64-bit Linux: the handler, a 128-byte mask, int flags (padded), the restorer.
_SIGACTION_SIZE = 8 + 128 + 8 + 8
_FLAGS_OFFSET = 8 + 128


def _sigaction() -> "tuple[Callable[..., int], int] | None":
    """libc's sigaction as a callable, and the address of its sleep; None where they cannot be had. Through
    _ctypes alone: the ctypes package costs a few milliseconds and ~860 objects of every run's start-up."""
    loaded = "_ctypes" in sys.modules
    try:
        import _ctypes
    except ImportError:
        return None
    native: Any = _ctypes
    try:
        class CInt(native._SimpleCData):  # type: ignore[misc]
            _type_ = "i"

        class Function(native.CFuncPtr):  # type: ignore[misc]
            _flags_ = native.FUNCFLAG_CDECL
            _restype_ = CInt

        libc = native.dlopen(None, 0)
        return Function(native.dlsym(libc, "sigaction")), int(native.dlsym(libc, "sleep"))
    except (OSError, AttributeError, TypeError):
        return None
    finally:
        if not loaded:
            sys.modules.pop("_ctypes", None)  # nothing of it stays for the program to see (or to free at exit)


_installed = [False]
_prepared: "list[tuple[Callable[..., int], int] | None]" = []


def prepare() -> None:
    """Find sigaction now, for the processes this one forks (pytest's, for its forked tests): they install
    without loading anything."""
    if not _prepared:
        _prepared.append(_sigaction())


def _park_action(sleep_address: int, flags: int) -> bytes:
    action = bytearray(_SIGACTION_SIZE)
    action[0:8] = sleep_address.to_bytes(8, sys.byteorder)
    action[_FLAGS_OFFSET:_FLAGS_OFFSET + 4] = (SA_RESETHAND | SA_NODEFER | flags).to_bytes(4, sys.byteorder)
    return bytes(action)


def install(faulthandler_file: int = 2) -> bool:
    """Park every fatal signal in this process (and the processes it forks); False where it cannot.
    ``faulthandler_file``: where faulthandler writes, when it is on (descriptor 2, as -X faulthandler has it)."""
    if sys.platform != "linux" or sys.maxsize < 2**32:
        return False
    if not _prepared:
        prepare()  # kept: a forked child parks its SIGTERM with it (install_termination)
    found = _prepared[0]
    if found is None:
        return False
    sigaction, sleep_address = found
    action = _park_action(sleep_address, 0)
    enabled = faulthandler.is_enabled()
    if enabled:
        faulthandler.disable()  # its handlers chain to what was there before: that must be the sleep
    try:
        done = [sigaction(signum, action, None) == 0 for signum in protocol.PARKED_SIGNALS]
    finally:
        if enabled:
            _enable_faulthandler(faulthandler_file)
    _installed[0] = any(done)  # what remove() must undo
    return all(done)


def install_termination() -> bool:
    """In a forked child whose crashes park: park SIGTERM too, where nothing handles or ignores it (x86-64
    only: the supervisor reads the sender where the kernel puts it on that architecture's stack)."""
    if not _installed[0] or os.uname().machine != "x86_64" or not _prepared or _prepared[0] is None:
        return False
    bit = 1 << (protocol.PARKED_TERMINATION - 1)
    try:
        with open("/proc/self/status") as status:
            masks = {name: int(value, 16) for name, _, value in
                     (line.partition(":") for line in status if line.startswith(("SigIgn:", "SigCgt:")))}
    except (OSError, ValueError):
        return False
    if len(masks) != 2 or any(mask & bit for mask in masks.values()):
        return False  # the program's (or a library's) own disposition: not lifeguard's to change
    sigaction, sleep_address = _prepared[0]
    return sigaction(protocol.PARKED_TERMINATION, _park_action(sleep_address, SA_SIGINFO), None) == 0


def _enable_faulthandler(file: int = 2) -> None:
    # Descriptor 2, as -X faulthandler and a forked test's own set-up have it (not sys.stderr: a test's may be
    # pytest's capture).
    try:
        faulthandler.enable(file=file, all_threads=True)
    except (RuntimeError, ValueError, OSError):
        pass


def remove() -> None:
    """The default dispositions again, faulthandler still in front (a no-op where nothing was parked)."""
    if not _installed[0]:
        return
    _installed[0] = False
    import _signal  # built in and set up at start-up: no import cost

    enabled = faulthandler.is_enabled()
    if enabled:
        faulthandler.disable()
    try:
        for signum in protocol.PARKED_SIGNALS:
            _signal.signal(signum, _signal.SIG_DFL)
    except ValueError:  # not the main thread: stay parked (the supervisor still reads and ends a crash)
        pass
    finally:
        if enabled:
            _enable_faulthandler()
