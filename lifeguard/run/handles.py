"""Handles on a started run's main process, however it was started: ``wait_step``, ``returncode``, ``reap``
(supervise.ChildHandle). Both wait on a pidfd, so an exit is seen at once, not at the next poll."""

from __future__ import annotations

import os
import subprocess
import time

from lifeguard.child.readable import readable

REAP_POLL = 0.01  # reap() after a kill: how often to look (the kill settles in milliseconds)


class _PidfdWait:
    """A child's pidfd, to sleep until its exit or a timeout (old kernels without pidfds: short sleeps)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def _sleep(self, timeout: float) -> None:
        if self._pidfd is not None:
            readable([self._pidfd], timeout)
        else:
            time.sleep(min(timeout, 0.005))

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class PopenHandle(_PidfdWait):
    """A fresh child started with Popen, waited on through a pidfd (no polling latency)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(proc.pid)
        self.proc = proc

    def wait_step(self, timeout: float) -> bool:
        if self.proc.poll() is None:
            self._sleep(timeout)
            if self.proc.poll() is None:
                return False
        self._close()
        return True

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def reap(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state): reported by the leak checks
        self._close()


class ForkedChild(_PidfdWait):
    """A child forked by this process, waited on through a pidfd (no polling latency)."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self._returncode: int | None = None

    def _poll(self) -> bool:
        if self._returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing more can be known of it
                pid, status = self.pid, 0
            if pid == 0:
                return False
            self._returncode = os.waitstatus_to_exitcode(status)
            self._close()
        return True

    def wait_step(self, timeout: float) -> bool:
        if self._poll():
            return True
        self._sleep(timeout)
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
