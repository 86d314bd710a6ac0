"""cgroup folders for runs: a membership no process of the run can leave by forking, setsid or an empty
environment (only a write to another cgroup's ``cgroup.procs``, which needs the supervisor's own rights).

A session gets one folder under the supervisor's own cgroup (``lifeguard-PID-XXXX``), each run one folder
inside it: the whole session can be killed with one write (the watchdog does that when the supervisor
vanishes), a run with one write to its own ``cgroup.kill``. cgroup v2 is preferred (``cgroup.kill`` kills
atomically, no fork can outrun it); the v1 ``pids`` hierarchy is the fallback, where ``pids.max = 0`` stops
every fork before the members are killed in rounds. Nothing here starts a process.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from lifeguard.child.watchdog import folder_members

# A kill is done when the folder has no live member; the kernel needs a moment after cgroup.kill.
KILL_SETTLE_TIMEOUT = 2.0
KILL_ROUNDS = 50  # v1 only: members are killed in rounds (pids.max = 0 already stops new forks)


@dataclass(frozen=True)
class Hierarchy:
    """A writable cgroup hierarchy: ``version`` 2 (the unified one) or 1 (the ``pids`` controller's)."""

    version: int
    base: Path  # the supervisor's own cgroup in that hierarchy: run folders are made below it
    view: str  # the same cgroup as /proc/PID/cgroup names it
    controllers: str = ""  # its /proc/PID/cgroup name: "" for the unified hierarchy, "pids" (or a list) for v1

    @property
    def name(self) -> str:
        return "cgroup2" if self.version == 2 else "cgroup1-pids"


def _mounts() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fstype, super options) of every mount, from /proc/self/mountinfo."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                sep = parts.index("-")
                found.append((parts[3], parts[4], parts[sep + 1], parts[sep + 3] if len(parts) > sep + 3 else ""))
    except (OSError, ValueError, IndexError):
        return []
    return found


def _own_cgroups() -> dict[str, str]:
    """Our cgroup path per hierarchy: "" for the unified one, else its controller list."""
    own = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                own[controllers] = path
    except (OSError, ValueError):
        return {}
    return own


def _below(mount: str, root: str, path: str) -> Path:
    """Where our cgroup ``path`` lies under a mount of the hierarchy's ``root`` (cgroup namespaces)."""
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return Path(mount) / ("" if relative == "." else relative)


def find_hierarchies() -> list[Hierarchy]:
    """The hierarchies a run folder could live in, best first (not yet checked for write access)."""
    own = _own_cgroups()
    found = []
    for root, mount, fstype, _ in _mounts():
        if fstype == "cgroup2" and "" in own:
            found.append(Hierarchy(2, _below(mount, root, own[""]), own[""]))
    for root, mount, fstype, options in _mounts():
        if fstype == "cgroup" and "pids" in options.split(","):
            named = next((c for c in own if "pids" in c.split(",")), None)
            if named is not None:
                found.append(Hierarchy(1, _below(mount, root, own[named]), own[named], named))
    return found


class CgroupFolder:
    """One cgroup folder: its members, a kill that leaves none, removal."""

    def __init__(self, hierarchy: Hierarchy, path: Path) -> None:
        self.hierarchy = hierarchy
        self.path = path
        relative = path.relative_to(hierarchy.base).as_posix()
        self.view = hierarchy.view.rstrip("/") + "/" + relative  # as /proc/PID/cgroup names it

    @classmethod
    def create(cls, hierarchy: Hierarchy, path: Path) -> CgroupFolder:
        path.mkdir()
        return cls(hierarchy, path)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def adopt(self, pid: int) -> None:
        """Move ``pid`` into this folder (the child waits for it: lifeguard.child.joined)."""
        _write(self.procs_file, str(pid))

    @property
    def proc_line(self) -> str:
        """How /proc/PID/cgroup names this folder: "CONTROLLERS:PATH"."""
        return f"{self.hierarchy.controllers}:{self.view}"

    def members(self) -> list[int]:
        """Every process in this folder and the folders below it (a run may make its own)."""
        return folder_members(str(self.path))

    def kill(self) -> None:
        """SIGKILL every member until none is left (or KILL_SETTLE_TIMEOUT: one in uninterruptible sleep)."""
        members = self.members()
        if not members:
            return
        kill_file = self.path / "cgroup.kill"
        if self.hierarchy.version == 2 and kill_file.exists():
            _write(kill_file, "1")
        else:
            self._kill_in_rounds(members)
        deadline = time.monotonic() + KILL_SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            left = self.members()
            if not left:
                return
            for pid in left:  # a member that was moved in after the kill
                sigkill(pid)
            time.sleep(0.005)

    def _kill_in_rounds(self, pids: list[int]) -> None:
        if self.hierarchy.version == 1:
            try:
                _write(self.path / "pids.max", "0")  # no member can fork between our scans
            except OSError:
                pass
        for _ in range(KILL_ROUNDS):
            for pid in pids:
                sigkill(pid)
            pids = self.members()
            if not pids:
                return
            time.sleep(0.002)

    def remove(self) -> bool:
        """Remove the folder (and any the run made below it); False while a member is still exiting."""
        try:
            os.rmdir(self.path)  # the usual case: no folder below it
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                raise
        for folder, _, _ in sorted(os.walk(self.path), key=lambda item: -len(item[0])):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                    return False
                raise
        return True


def memory_limit() -> int | None:
    """The tightest memory limit in bytes on this process's cgroup and its ancestors (cgroup v2 ``memory.max``,
    v1 ``memory.limit_in_bytes``), which the processes lifeguard starts share; None: no limit or unreadable."""
    own = _own_cgroups()
    limits = []
    for root, mount, fstype, options in _mounts():
        if fstype == "cgroup2" and "" in own:
            folder, name = _below(mount, root, own[""]), "memory.max"
        elif fstype == "cgroup" and "memory" in options.split(","):
            named = next((c for c in own if "memory" in c.split(",")), None)
            if named is None:
                continue
            folder, name = _below(mount, root, own[named]), "memory.limit_in_bytes"
        else:
            continue
        for level in (folder, *folder.parents):
            if not str(level).startswith(mount):
                break
            try:
                text = (level / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 2**60:  # v1 says "no limit" with a number near 2**63
                limits.append(int(text))
    return min(limits) if limits else None


def session_folder_name() -> str:
    """A new session folder's name: ``lifeguard-PID-PIDNS-RANDOM``. The owner is this process, as its PID
    namespace numbers it: another namespace's lifeguard, which cannot see that pid, must never read the
    folder as stale (remove_stale)."""
    return f"lifeguard-{os.getpid()}-{pid_namespace()}-{os.urandom(3).hex()}"


def pid_namespace() -> str:
    """This process's PID namespace, as the number of its /proc/self/ns/pid link ("0": unreadable)."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return "0"
    digits = link.partition("[")[2].rstrip("]")
    return digits if digits.isdigit() else "0"


def stale_owner(name: str) -> int | None:
    """The owner's pid of a session folder named ``name`` whose owner is proven gone, else None: a folder of
    this PID namespace whose owner's pid is no process here. One made in another namespace (or by anything
    but lifeguard) proves nothing, and is never touched."""
    parts = name.split("-")
    if len(parts) != 4 or parts[0] != "lifeguard" or not parts[1].isdigit():
        return None
    owner = int(parts[1])
    if parts[2] != pid_namespace() or parts[2] == "0" or owner <= 1 or os.path.exists(f"/proc/{owner}"):
        return None
    return owner


def remove_stale(hierarchy: Hierarchy) -> None:
    """Remove the session folders of lifeguards that are gone (killed with their watchdog), killing what
    they left running: nobody else will."""
    try:
        names = os.listdir(hierarchy.base)
    except OSError:
        return
    for name in names:
        if stale_owner(name) is None:
            continue
        folder = CgroupFolder(hierarchy, hierarchy.base / name)
        try:
            folder.kill()
            folder.remove()
        except OSError:
            continue


def in_folder(pid: int, folder: CgroupFolder) -> bool:
    """Is ``pid`` (a zombie too: the kernel keeps a dead task's cgroup until it is reaped) in ``folder``?"""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controllers == "") if folder.hierarchy.version == 2 else ("pids" in controllers.split(",")):
            return path == folder.view or path.startswith(folder.view + "/")
    return False


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def sigkill(pid: int) -> None:
    if pid <= 1 or pid == os.getpid():  # 0 is how a pid of another namespace reads; 0, 1, -1 are never a run's
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
