"""How a process's forked children ended, from the kernel (standard library only).

A forked child's end is seen by its parent alone: the program reaps it, and a child killed by a signal
leaves no event of its own. So each process of a run holds a pidfd of every child it forks (opened in the
fork hook's parent half, before the program can reap the child), and at its exit asks the kernel how each
ended: ``waitid(P_PIDFD, WNOWAIT)`` for a child not yet reaped (it stays reapable), the pidfd's exit
information (Linux 6.15 and later) for one the program reaped. Children still alive are left to the
supervisor. Without pidfds (an older kernel) nothing is held and nothing is reported.
"""

import os
import sys

from lifeguard.child import unpatched

MAX_HELD = 256  # pidfds held at once; past it, those of ended children are read and closed
MAX_REPORTED = 64  # abnormal ends kept for the report
PIDFD_GET_INFO = 0xC040FF0B  # _IOWR(0xFF, 11, struct pidfd_info), its first 64-byte version
PIDFD_INFO_EXIT = 0x8
# struct pidfd_info: mask (u64), cgroupid (u64), pid..fsgid (11 u32), exit_code (s32, a wait status); read with
# int.from_bytes (struct's import is a third of a millisecond of every run's start).
_INFO_SIZE = 64
_EXIT_CODE_AT = 60

_held: dict[int, tuple[int, int]] = {}  # child pid -> its pidfd and the pidfd's inode
_ended: list[tuple[int, int]] = []  # (pid, exit code; negative: the signal) of children that ended non-zero


def newest_child() -> int | None:
    """The child this thread forked last (the kernel lists a thread's children oldest first)."""
    try:
        with open("/proc/thread-self/children") as listing:
            pids = listing.read().split()
    except OSError:
        return None
    return int(pids[-1]) if pids else None


def hold_newest() -> None:
    """In the parent, right after a fork: hold a pidfd of the new child."""
    pidfd_open = getattr(os, "pidfd_open", None)
    pid = newest_child()
    if pidfd_open is None or pid is None or pid in _held:
        return
    if len(_held) >= MAX_HELD:
        _prune()
        if len(_held) >= MAX_HELD:
            return
    try:
        pidfd = pidfd_open(pid)
        _held[pid] = pidfd, os.fstat(pidfd).st_ino
    except OSError:
        pass


def _still_ours(pidfd: int, inode: int) -> bool:
    """Is the descriptor still the pidfd opened here? A program may close every descriptor and reuse the
    number for a file of its own, which must never be closed or read as ours."""
    try:
        return os.fstat(pidfd).st_ino == inode
    except OSError:
        return False


def forget_inherited() -> None:
    """In a forked child: the parent's pidfds are not its own."""
    for pidfd, inode in _held.values():
        if _still_ours(pidfd, inode):
            unpatched.close(pidfd)
    _held.clear()
    _ended.clear()


def exit_code(pidfd: int) -> int | None:
    """How the child ended (an exit code, or minus its signal), or None while it runs or when unknown."""
    try:
        found = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (OSError, AttributeError):
        found = None  # reaped already (or no P_PIDFD): the pidfd's exit information says
    else:
        if found is None:
            return None  # still running
        return found.si_status if found.si_code == os.CLD_EXITED else -found.si_status
    try:
        import fcntl

        info = bytearray(PIDFD_INFO_EXIT.to_bytes(8, sys.byteorder) + bytes(_INFO_SIZE - 8))
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, info)
    except (OSError, ImportError):
        return None
    if not int.from_bytes(info[:8], sys.byteorder) & PIDFD_INFO_EXIT:
        return None
    return os.waitstatus_to_exitcode(int.from_bytes(info[_EXIT_CODE_AT:_INFO_SIZE], sys.byteorder, signed=True))


def _prune() -> None:
    for pid, (pidfd, inode) in list(_held.items()):
        if not _still_ours(pidfd, inode):
            del _held[pid]  # the program closed it: that child's end is not known here
            continue
        code = exit_code(pidfd)
        if code is None:
            continue
        unpatched.close(pidfd)
        del _held[pid]
        if code != 0 and len(_ended) < MAX_REPORTED:
            _ended.append((pid, code))


def abnormal_ends() -> list[tuple[int, int]]:
    """(pid, code) of every held child that has ended with a non-zero code or a signal, in fork order."""
    _prune()
    return list(_ended)
