"""Which processes belong to a run: found, reaped and killed by a mechanism the run cannot leave.

Two mechanisms, chosen once per session (``lifeguard doctor`` and report.json name the one used):
- **cgroup** (lifeguard.run.cgroups): each run in a cgroup folder of its own, joined before the child's first
  instruction (in the forked child, before exec, or by the fork-server's child before the body). setsid, an
  empty environment or a double fork do not leave it; a kill is one write.
- **subreaper** where no cgroup hierarchy is writable: the supervisor is a child subreaper, so every orphan is
  re-parented to it; the run's ancestry (parent links, its session, the run marker in the environment) is
  recorded at every look while the run lives, so an orphan is attributed by the parent it had, not by its
  environment alone.
Either way, zombies the supervisor inherits are reaped as they appear (a run forking thousands of short
children must not exhaust the pid space), but only the run's own: a blanket wait would steal the exit status
of a parallel run's main process, or of a capture tool, from its Popen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from lifeguard.child.protocol import CGROUP_ENV
from lifeguard.run import cgroups
from lifeguard.run.proctree import ProcInfo, all_processes, has_marker, kill_tree, read_proc

SUBREAPER = "subreaper"


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

    def kill(self) -> list[int]:
        """SIGKILL every member until none is left; the pids killed."""
        ...

    def close(self) -> None:
        """After the run: reap what is left of it, remove what was made for it."""
        ...


def _our_zombies() -> list[int]:
    """Zombie children of the supervisor (from every thread's children list)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            info = read_proc(pid)
            if info is not None and info.state == "Z":
                found.append(pid)
    return found


def _children_of(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # reaped by someone else meanwhile


class CgroupMembership:
    def __init__(self, folder: cgroups.CgroupFolder) -> None:
        self.folder = folder
        self.mechanism = folder.hierarchy.name
        self.root = 0

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
            for kid in _children_of(stack.pop()):
                if not cgroups.in_folder(kid, self.folder):
                    try:
                        self.folder.adopt(kid)
                    except OSError:
                        pass  # gone meanwhile
                stack.append(kid)

    def members(self) -> list[int]:
        live = [p for p in self.folder.members() if _alive(p)]
        return sorted(live, key=lambda p: (p != self.root, p))

    def watch(self) -> None:
        for pid in _our_zombies():
            if pid != self.root and cgroups.in_folder(pid, self.folder):
                _reap(pid)

    def kill(self) -> list[int]:
        return self.folder.kill()

    def close(self) -> None:
        if self.folder.members():
            self.folder.kill()
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
        if info.ppid in self.seen or info.sid == self.root:
            return True
        if info.ppid != me:
            return False
        if has_marker(info.pid, self.run_id):
            return True
        return (info.start >= self.root_start and info.state != "Z" and self.unclaimed is not None
                and self.unclaimed(self, info))

    def _scan(self) -> list[int]:
        """Record every live process descended from a recorded member, in the run's session, or an orphan of
        ours with the run's marker (or unclaimed, see the class); then the live members."""
        procs = all_processes()
        me = os.getpid()
        for info in procs.values():
            if info.pid not in self.seen and info.pid != me and self._belongs(info, me):
                self.seen.add(info.pid)
        # A chain recorded in one look (a parent and its child both new) needs the closure.
        changed = True
        while changed:
            changed = False
            for info in procs.values():
                if info.pid not in self.seen and info.ppid in self.seen and info.pid != me:
                    self.seen.add(info.pid)
                    changed = True
        live = [p for p in self.seen if p in procs and procs[p].state != "Z"]
        return sorted(live, key=lambda p: (p != self.root, p))

    def members(self) -> list[int]:
        return self._scan()

    def watch(self) -> None:
        self._scan()
        for pid in _our_zombies():
            if pid != self.root and pid in self.seen:
                _reap(pid)

    def kill(self) -> list[int]:
        killed = set(kill_tree(self.root, self.run_id))
        for _ in range(3):  # what the tree walk missed: members recorded earlier that left the session
            left = self._scan()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, 9)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
        return sorted(killed)

    def close(self) -> None:
        self.watch()


def _alive(pid: int) -> bool:
    info = read_proc(pid)
    return info is not None and info.state != "Z"


def session_folder() -> tuple[cgroups.CgroupFolder | None, str]:
    """A folder of our own in the first writable hierarchy, or None and why."""
    reasons = []
    for hierarchy in cgroups.find_hierarchies():
        cgroups.remove_stale(hierarchy)
        path = hierarchy.base / f"lifeguard-{os.getpid()}-{os.urandom(3).hex()}"
        try:
            return cgroups.CgroupFolder.create(hierarchy, path), ""
        except OSError as exc:
            reasons.append(f"{hierarchy.name} at {hierarchy.base}: {exc.strerror or exc}")
    return None, "; ".join(reasons) or "no cgroup hierarchy is mounted"
