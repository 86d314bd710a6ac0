"""The session-wide half of run membership: one mechanism, one cgroup folder, one watchdog per process.

Created on the first run (``containment()``), it is shared by the engine, the fork-server and every direct
caller of ``run_once`` (tests, probes), and torn down at interpreter exit: whatever a run left in the session
folder is killed then. If the supervisor dies without that, the watchdog does it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from lifeguard.child.joined import own_process_group
from lifeguard.child.protocol import MEMBERSHIP_ENV, SUPERVISOR_ENV
from lifeguard.proc import cgroups
from lifeguard.proc.membership import (
    SUBREAPER,
    CgroupMembership,
    RunMembership,
    SubreaperMembership,
    session_folder,
)
from lifeguard.proc.procfs import PR_SET_PDEATHSIG, ProcInfo, become_subreaper, libc
from lifeguard.proc.watchdog import Watchdog
from lifeguard.run.headstart import take_watchdog
from lifeguard.run.headstart_process import is_python_program

CHOICES = ("auto", "cgroup", SUBREAPER)  # MEMBERSHIP_ENV's values


class Containment:
    """The session's mechanism, the folder its runs' folders live in, and the watchdog guarding both."""

    def __init__(self, prefer: str | None = None) -> None:
        self.prefer = prefer or os.environ.get(MEMBERSHIP_ENV, "") or "auto"
        if self.prefer not in CHOICES:
            self.prefer = "auto"
        become_subreaper()  # orphans come to us (to be reaped), with cgroups or without
        self.owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._count = 0
        self.session: cgroups.CgroupFolder | None = None
        self.why_not_cgroup = "subreaper asked for (LIFEGUARD_MEMBERSHIP)" if self.prefer == SUBREAPER else ""
        if self.prefer != SUBREAPER:
            self.session, self.why_not_cgroup = session_folder()
        self.watchdog = Watchdog(take_watchdog())  # the head start's, if a command started ahead of us
        self.spawned: set[int] = {self.watchdog.pid}  # children the supervisor started for itself
        self.live: set[SubreaperMembership] = set()
        self.cgroup_runs: dict[str, CgroupMembership] = {}  # live runs in folders of their own, by run id
        if self.session is not None:
            self.watchdog.guard_folder(self.session.path)

    @property
    def mechanism(self) -> str:
        return self.session.hierarchy.name if self.session is not None else SUBREAPER

    def for_run(self, run_id: str, *, by_ancestry: bool = False) -> RunMembership:
        """A new run's membership: a cgroup folder of its own where the session has one (unless
        ``by_ancestry``), else tracked by ancestry as the subreaper's."""
        if self.session is not None and not by_ancestry:
            with self._lock:
                self._count += 1
                name = f"run-{self._count}"
            try:
                folder = cgroups.CgroupFolder.create(self.session.hierarchy, self.session.path / name)
                return SessionCgroupRun(folder, run_id, self)
            except OSError:
                pass  # the folder went away under us: still supervised, by ancestry
        return GuardedSubreaper(run_id, self)

    def revive_watchdog(self) -> None:
        """A watchdog a run killed is replaced at once: the session must never be without one."""
        pid = self.watchdog.revive()
        if pid is not None:
            with self._lock:
                self.spawned.add(pid)

    def track(self, run: SubreaperMembership, live: bool) -> None:
        """``run`` (tracked by ancestry) started or ended."""
        with self._lock:
            if live:
                self.live.add(run)
            else:
                self.live.discard(run)

    def only_live_run(self, run: SubreaperMembership, info: ProcInfo) -> bool:
        """May ``run`` claim the unexplained orphan ``info``? Only as the one live run, and never one of
        the supervisor's own children."""
        with self._lock:
            return info.pid not in self.spawned and self.live == {run}

    def close(self, *, reap: bool = True) -> None:
        """Kill what is left in the session's folder, remove it, and end the watchdog (``reap``: wait for its
        exit; at interpreter exit there is no need: it exits by itself the moment its pipe closes)."""
        if os.getpid() != self.owner_pid:  # a run forked from this process (pytest --lifeguard) at its exit
            return
        if self.session is not None:
            self.session.kill()
            self.session.remove()
            self.watchdog.release_folder(self.session.path)
        self.watchdog.close(wait=reap)


class SessionCgroupRun(CgroupMembership):
    """A run in a cgroup folder of the session's, known to the session while it lives."""

    def __init__(self, folder: cgroups.CgroupFolder, run_id: str, owner: Containment) -> None:
        super().__init__(folder, run_id, owner.session, owner.cgroup_runs.get)
        self.owner = owner
        self.helpers = lambda: owner.spawned
        with owner._lock:
            owner.cgroup_runs[run_id] = self

    def close(self) -> None:
        with self.owner._lock:
            self.owner.cgroup_runs.pop(self.run_id, None)
        super().close()


class GuardedSubreaper(SubreaperMembership):
    """A run tracked by ancestry, registered with the watchdog while it lives."""

    def __init__(self, run_id: str, owner: Containment) -> None:
        super().__init__(run_id, owner.only_live_run)
        self.owner = owner
        self.helpers = lambda: owner.spawned

    def started(self, root: int) -> None:
        super().started(root)
        self.owner.track(self, live=True)
        self.owner.watchdog.guard_run(root, self.run_id)  # a run's main process leads its own process group

    def recorded(self, info: ProcInfo) -> None:
        if info.pid != self.root:  # the root is the run's group, registered at its start
            self.owner.watchdog.guard_member(self.root, info.pid, info.start)

    def close(self) -> None:
        super().close()
        self.owner.track(self, live=False)
        self.owner.watchdog.release_run(self.root)


_containment: Containment | None = None
_containment_lock = threading.Lock()


def containment() -> Containment:
    """This process's containment, made on first use."""
    global _containment
    with _containment_lock:
        if _containment is None:
            _containment = Containment()
            atexit.register(_containment.close, reap=False)
        return _containment


def spawn(argv: list[str], join: Path | None, *, parent_death: bool = True, waits_for_cgroup: bool = False,
          **popen: Any) -> subprocess.Popen[bytes]:
    """Popen a process that joins the cgroup of ``join`` (its ``cgroup.procs``) before exec, leads a process
    group of its own in our session (child.joined.own_process_group) and, with ``parent_death``, asks to be
    killed with the thread that started it. A run's main process is started by the thread that supervises it
    to its end, so that signal (which follows the creating *thread*, prctl(2)) fires only when the supervision
    is gone; the fork-server outlives the worker thread that started it.

    ``waits_for_cgroup``: the process is lifeguard's bootstrap, to be moved into a run's cgroup (the
    watchdog's to kill from then on); it ends itself if the supervisor dies before that (protocol's
    SUPERVISOR_ENV). No death signal is then asked for, no Python step runs between fork and exec, and the
    spawn is a vfork, not a fork of the whole supervisor (3.11+: Popen's process_group)."""
    if waits_for_cgroup and join is None and sys.version_info >= (3, 11):
        env = popen.pop("env", None)
        env = dict(os.environ if env is None else env, **{SUPERVISOR_ENV: str(os.getpid())})
        return subprocess.Popen(argv, process_group=0, env=env, **popen)
    prctl, death_signal = libc().prctl, int(signal.SIGKILL)  # looked up before the fork
    fd = os.open(join, os.O_WRONLY | os.O_CLOEXEC) if join is not None else -1

    def setup() -> None:  # between fork and exec: no allocation-heavy work, no locks
        if fd >= 0:
            os.write(fd, b"0")  # "0": the writing process itself
        own_process_group()
        if parent_death:
            prctl(PR_SET_PDEATHSIG, death_signal, 0, 0, 0)

    try:
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, preexec_fn=setup, **popen)
        if not parent_death:  # one of the supervisor's own helpers (the fork-server): never a run's orphan
            with _containment_lock:
                if _containment is not None:
                    _containment.spawned.add(proc.pid)
        return proc
    finally:
        if fd >= 0:
            os.close(fd)


def starts_python(program: str, env: dict[str, str]) -> bool:
    """Is ``program`` a Python interpreter, or a script run by one (a console script such as ``pytest``)? Its
    first code of its own then runs after the interpreter's start-up, where the attach hook waits for the
    run's cgroup; anything else might fork before that."""
    path = shutil.which(program, path=env.get("PATH")) if os.sep not in program else program
    return path is not None and is_python_program(path)
