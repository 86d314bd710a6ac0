"""Handles on a started run's main process, however it was started: ``wait_step``, ``returncode``, ``lost``,
``reap`` (supervise.ChildHandle). Both wait on a pidfd, so an exit is seen at once, not at the next poll, and
read the exit status from the kernel themselves: the program under test may ignore SIGCHLD or reap every
child with ``waitpid(-1)`` in a thread of the process that started the run (a pytest session's fixture), and
a status it took is never taken for 0."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from lifeguard.child.readable import readable

REAP_POLL = 0.01  # reap() after a kill: how often to look (the kill settles in milliseconds)
# Why a run's exit status is unknown: what else in the process can have collected it.
STATUS_LOST = ("its exit status was collected by something else in the process that started it (SIGCHLD "
               "ignored, or a waitpid(-1) of its own): lifeguard cannot know how it ended")


def _exit_code(pid: int, pidfd: int | None) -> tuple[bool, int | None]:
    """(exited, exit code: negative for a signal, None when the status was lost) of our child ``pid``."""
    try:
        if pidfd is not None:
            info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
            if info is None:
                return False, None
            if info.si_code == os.CLD_EXITED:
                return True, info.si_status
            return True, -info.si_status  # CLD_KILLED, CLD_DUMPED
        found, status = os.waitpid(pid, os.WNOHANG)
        if found == 0:
            return False, None
        return True, os.waitstatus_to_exitcode(status)
    except ChildProcessError:  # collected by someone else: gone, and how it ended with it
        return True, None


class _PidfdWait:
    """A child's pidfd, to sleep until its exit or a timeout and read its status (old kernels without pidfds:
    short sleeps and waitpid)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._returncode: int | None = None
        self._exited = False
        self.lost: str | None = None  # why the exit status is unknown, once it exited
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfds here, or the child is gone already (collected)
            self._pidfd = None

    def _poll(self) -> bool:
        if not self._exited:
            self._exited, self._returncode = _exit_code(self.pid, self._pidfd)
            if self._exited:
                if self._returncode is None:
                    self.lost = STATUS_LOST
                self._close()
        return self._exited

    def wait_step(self, timeout: float) -> bool:
        if self._poll():
            return True
        if self._pidfd is not None:
            readable([self._pidfd], timeout)
        else:
            time.sleep(min(timeout, 0.005))
        return self._poll()

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.wait_step(min(REAP_POLL, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return  # unkillable (D state): reported by the leak checks
        self._close()

    def end(self, timeout: float) -> None:
        """SIGKILL the child and the process group it leads, unless it has exited; then reap it (bounded). Its
        pid stays its own until it is reaped here, so no other process can be hit."""
        if not self._poll():
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.pid, signal.SIGKILL)
                except OSError:  # no such group yet (the child had not left its parent's), or gone
                    pass
        self.reap(timeout)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class PopenHandle(_PidfdWait):
    """A fresh child started with Popen. Its status is read here, not by Popen.poll(), which takes a status
    collected elsewhere for 0 (bpo-15756)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(proc.pid)
        self.proc = proc

    def _poll(self) -> bool:
        exited = super()._poll()
        if exited and self.proc.returncode is None:
            # Popen must never wait for this pid again (it may be another process's by now).
            self.proc.returncode = self._returncode if self._returncode is not None else -1
        return exited


class ForkedChild(_PidfdWait):
    """A child forked by this process (a forked test, the head start, the watchdog)."""
