"""Handshake helpers: wait until a thread is blocked in a given system call on a given fd.

/proc/self/task/TID/syscall names the system call a blocked thread is in and its
arguments ("1 0x5 ..." is write(5, ...)), so the main thread can tell that the writer
is inside BufferedWriter.write (its lock held) before forking: no sleep, no race.
"""

import os
import time

SYS_WRITE = 1  # x86-64 system call numbers
SYS_READ = 0


def in_syscall(tid: int, number: int, fd: int) -> bool:
    """True when thread tid of this process is blocked in system call number on fd."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == str(number) and int(fields[1], 16) == fd


def wait_blocked(tid: int, number: int, fd: int, timeout: float = 10.0) -> None:
    """Wait until thread tid blocks in system call number on fd (RuntimeError after timeout)."""
    deadline = time.monotonic() + timeout
    while not in_syscall(tid, number, fd):
        if time.monotonic() > deadline:
            raise RuntimeError(f"thread {tid} never blocked in syscall {number} on fd {fd}")
        time.sleep(0.01)
    os.sched_yield()
