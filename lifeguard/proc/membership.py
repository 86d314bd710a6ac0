"""Which processes belong to a run: found, reaped and killed by a mechanism the run cannot leave.

Two mechanisms, chosen once per session (``lifeguard doctor`` and report.json name the one used):
- **cgroup** (lifeguard.proc.cgroups): each run in a cgroup folder of its own, joined before any of the run's own
  code: before exec for a program that is not Python, by the fork-server's child first of all, and for a
  Python child while its interpreter starts (it waits for it: lifeguard.child.joined). setsid, an empty
  environment or a double fork do not leave it; a kill is one write.
- **subreaper** where no cgroup hierarchy is writable: the supervisor is a child subreaper, so every orphan is
  re-parented to it; the run's ancestry (parent links, its process group, the run marker in the environment) is
  recorded at every look while the run lives, so an orphan is attributed by the parent it had, not by its
  environment alone.
Either way, zombies the supervisor inherits are reaped as they appear (a run forking thousands of short
children must not exhaust the pid space), but only the run's own: a blanket wait would steal the exit status
of a parallel run's main process, or of a capture tool, from its Popen.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol

from lifeguard.child.protocol import CGROUP_ENV
from lifeguard.proc import cgroups
from lifeguard.proc.procfs import ProcInfo, alive, all_processes, children_of, has_marker, read_proc, run_marker

SUBREAPER = "subreaper"
KILL_ROUNDS = 5


class RunMembership(Protocol):
    """The processes of one run."""

    mechanism: str
    root: int

    def join_file(self) -> Path | None:
        """The file a new member writes its own pid to before it runs anything (None: nothing to join)."""
        ...

    def started(self, root: int) -> None:
        """The run's main process is ``root``."""
        ...

    def child_env(self) -> dict[str, str]:
        """What the run's environment gets so its processes wait until they are members."""
        ...

    def adopt(self, root: int) -> None:
        """Make the started ``root`` (which was not made a member before exec) and anything it forked
        meanwhile members, and record it as the run's main process."""
        ...

    def members(self) -> list[int]:
        """Live members, the main process first."""
        ...

    def watch(self) -> None:
        """One look while the run lives: reap its zombie orphans, record its ancestry."""
        ...

    def kill(self) -> None:
        """SIGKILL every member until none is left."""
        ...

    def close(self) -> None:
        """After the run: reap what is left of it, remove what was made for it."""
        ...


def _our_zombies() -> list[int]:
    """Zombie children of the supervisor."""
    return [pid for pid in children_of(os.getpid()) if (info := read_proc(pid)) is not None and info.state == "Z"]


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # reaped by someone else meanwhile


class CgroupMembership:
    """A run in a cgroup folder of its own. A process of the run that a write to another cgroup's cgroup.procs
    took out of the folder (root may do that) is still the run's while it carries the run's marker: found
    among the supervisor's orphans and in the session's other run folders. One in this folder that carries
    another run's marker is that run's (moved here to fail this one)."""

    def __init__(self, folder: cgroups.CgroupFolder, run_id: str = "", session: cgroups.CgroupFolder | None = None,
                 live_run: Callable[[str], CgroupMembership | None] = lambda run_id: None) -> None:
        self.folder = folder
        self.mechanism = folder.hierarchy.name
        self.root = 0
        self.run_id = run_id
        self.session = session
        self.live_run = live_run  # the live run of this session with that id, if any
        self.helpers: Callable[[], Collection[int]] = tuple  # children the supervisor started for itself
        # The end-of-run look found the main process gone, no live process in the folder and none of the run
        # outside it: nothing is left that could start another, so close() only removes the folder.
        self.ended = False

    def join_file(self) -> Path | None:
        return self.folder.procs_file

    def started(self, root: int) -> None:
        self.root = root

    def child_env(self) -> dict[str, str]:
        return {CGROUP_ENV: self.folder.proc_line}

    def adopt(self, root: int) -> None:
        self.started(root)
        self.folder.adopt(root)
        # What it forked before the move (a command that forks at once) stayed outside: move it too.
        stack = [root]
        while stack:
            for kid in children_of(stack.pop()):
                if not cgroups.in_folder(kid, self.folder):
                    try:
                        self.folder.adopt(kid)
                    except OSError:
                        pass  # gone meanwhile
                stack.append(kid)

    def members(self) -> list[int]:
        here = set(self.folder.members())
        live = [p for p in here if alive(p) and (p == self.root or run_marker(p) in (None, self.run_id))]
        if not (self.root and alive(self.root)):  # the end-of-run look (not every wake of the wait loop)
            live += self._moved_out(here)
            self.ended = not here and not live
        return sorted(live, key=lambda p: (p != self.root, p))

    def _moved_out(self, here: set[int]) -> list[int]:
        """Live processes carrying this run's marker outside its folder: the supervisor's orphans, and members
        of the session's other run folders."""
        if not self.run_id:
            return []
        elsewhere = set(children_of(os.getpid())) | set(self.session.members() if self.session is not None else ())
        candidates = elsewhere - here - set(self.helpers())  # the fork-server's environment is never read
        return [p for p in sorted(candidates) if p > 1 and alive(p) and has_marker(p, self.run_id)]

    def _return_strays(self) -> None:
        """Processes of another live run moved into this folder go back to that run's folder, for its own end
        to find (killing them here would hide them from it)."""
        for pid in self.folder.members():
            marker = run_marker(pid)
            owner = self.live_run(marker) if marker not in (None, self.run_id) else None
            if owner is not None:
                try:
                    owner.folder.adopt(pid)
                except OSError:
                    pass  # gone meanwhile, or that folder is: killed with this one

    def watch(self) -> None:
        for pid in _our_zombies():
            if pid != self.root and (cgroups.in_folder(pid, self.folder) or has_marker(pid, self.run_id)):
                _reap(pid)

    def kill(self) -> None:
        self.folder.kill()
        for pid in self._moved_out(set()):
            cgroups.sigkill(pid)

    def close(self) -> None:
        if self.ended:
            self.watch()  # first: a zombie's cgroup is named as this folder only while the folder exists
            if self.folder.remove():
                return
        self._return_strays()
        self.kill()
        self.watch()
        if not self.folder.remove():  # a member still exiting: one more look, then leave it to the session
            self.watch()
            self.folder.remove()


class SubreaperMembership:
    """A run tracked by ancestry. ``unclaimed`` says whether an orphan of ours that no ancestry explains may be
    taken: one started after this run and not by the supervisor itself, while this is the only live run (its
    parent exited between two looks, after dropping the session and the environment)."""

    def __init__(self, run_id: str, unclaimed: Callable[[SubreaperMembership, ProcInfo], bool] | None = None) -> None:
        self.run_id = run_id
        self.mechanism = SUBREAPER
        self.root = 0
        self.root_start = 0
        self.seen: set[int] = set()  # every pid ever recorded as the run's (pids are not reused while it lives)
        self.unclaimed = unclaimed
        self.helpers: Callable[[], Collection[int]] = tuple  # children the supervisor started for itself
        # A look found the main process gone and nothing of the run left: as every orphan comes to us, nothing
        # of it can appear again, and the look at its end (close) is spared.
        self.ended = False

    def join_file(self) -> Path | None:
        return None

    def child_env(self) -> dict[str, str]:
        return {}

    def adopt(self, root: int) -> None:
        self.started(root)

    def started(self, root: int) -> None:
        self.root = root
        self.seen.add(root)
        info = read_proc(root)
        self.root_start = info.start if info is not None else 0

    def _belongs(self, info: ProcInfo, me: int) -> bool:
        if info.ppid in self.seen or info.pgrp == self.root:
            return True
        if info.ppid != me:
            return False
        if has_marker(info.pid, self.run_id):
            return True
        return (info.start >= self.root_start and info.state != "Z" and self.unclaimed is not None
                and self.unclaimed(self, info))

    def _nothing_left(self, me: int) -> bool:
        """The main process is gone and no child of ours could be the run's: then nothing is. We are the
        subreaper, so once the main process has exited every live member is a child of ours or below one,
        and a child of ours that started before the run is not the run's (see _belongs). A look at our own
        children instead of every process of the machine: what a short run's end costs. A main process that
        is a zombie not reaped yet is gone too (its children were handed to us as it exited): the first look
        after a run's end comes before its reaping."""
        if not self.root:
            return False
        root = read_proc(self.root)
        exited = root is not None and root.state == "Z" and root.start == self.root_start
        if root is not None and not exited:
            return False
        helpers = self.helpers()
        for pid in children_of(me):
            if pid in helpers or (exited and pid == self.root):
                continue  # the watchdog: started with a head-started run, maybe in the same clock tick
            info = read_proc(pid)
            if info is not None and (pid in self.seen or info.start >= self.root_start):
                return False
        return True

    def _scan(self) -> list[int]:
        """Record every live process descended from a recorded member, in the run's process group, or an orphan of
        ours with the run's marker (or unclaimed, see the class); then the live members."""
        me = os.getpid()
        if self.ended or self._nothing_left(me):
            self.ended = True
            return []
        procs = all_processes()
        changed = True
        new: list[ProcInfo] = []
        while changed:  # to the closure: a parent and its child may both be new in one look
            changed = False
            for info in procs.values():
                if info.pid not in self.seen and info.pid != me and self._belongs(info, me):
                    self.seen.add(info.pid)
                    new.append(info)
                    changed = True
        for info in new:
            if info.state != "Z":
                self.recorded(info)
        live = [p for p in self.seen if p in procs and procs[p].state != "Z"]
        return sorted(live, key=lambda p: (p != self.root, p))

    def recorded(self, info: ProcInfo) -> None:
        """A process newly found to be the run's (the session's watchdog is told: GuardedSubreaper)."""

    def members(self) -> list[int]:
        return self._scan()

    def watch(self) -> None:
        self._scan()
        for pid in _our_zombies():
            if pid != self.root and pid in self.seen:
                _reap(pid)

    def kill(self) -> None:
        for _ in range(KILL_ROUNDS):  # rounds: a member may fork between a scan and the kill
            left = self._scan()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.killpg(self.root, signal.SIGKILL)  # the run's process group, as it was at the start
            except (ProcessLookupError, PermissionError):
                pass
            time.sleep(0.01)

    def close(self) -> None:
        if not self.ended:
            self.watch()


def session_folder() -> tuple[cgroups.CgroupFolder | None, str]:
    """A folder of our own in the first writable hierarchy, or None and why."""
    reasons = []
    for hierarchy in cgroups.find_hierarchies():
        cgroups.remove_stale(hierarchy)
        path = hierarchy.base / cgroups.session_folder_name()
        try:
            return cgroups.CgroupFolder.create(hierarchy, path), ""
        except OSError as exc:
            reasons.append(f"{hierarchy.name} at {hierarchy.base}: {exc.strerror or exc}")
    return None, "; ".join(reasons) or "no cgroup hierarchy is mounted"
