"""The watchdog: a tiny process that kills every live run's tree when the supervisor vanishes.

Started by the supervisor before the first run (``python -I -S watchdog.py RUN_ID_ENV``, standard library only), in a
session of its own and deaf to the terminal's signals, it reads lines from the pipe the supervisor holds:

  cgroup PATH        a session's cgroup folder: every run of the session lives below it
  run PGID RUN_ID    a run tracked without cgroups: its process group and the marker in its environment
  member PGID PID START  a process the supervisor attributed to that run by ancestry (START: its start time
                     in clock ticks, so a reused pid is never taken for it): one that left the group and
                     wiped its environment still dies with the run
  done PGID          that run is over

End of file means the supervisor is gone, whether it exited, was killed by SIGKILL or crashed: everything
still registered is killed (a folder with ``cgroup.kill``, or ``pids.max = 0`` and kill rounds; a run
without cgroups by its process group and a /proc scan for its group and marker), then the watchdog
exits. After an orderly shutdown nothing is left to kill and it just exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

KILL_ROUNDS = 50
ROUND_PAUSE = 0.01


def populated(folder: str) -> bool | None:
    """Does a live process remain in the cgroup folder or below it (v2's ``cgroup.events``; an exited
    process that is not yet reaped counts no more)? None where the file is not there (v1) or unreadable."""
    try:
        with open(os.path.join(folder, "cgroup.events"), "rb") as f:
            for line in f.read().splitlines():
                if line.startswith(b"populated "):
                    return line != b"populated 0"
    except OSError:
        pass
    return None


def folder_members(folder: str) -> list[int]:
    """Every process in a cgroup folder and the folders below it (also the supervisor's reading). A folder
    that v2 says holds no live process is not listed: a passed run's end looks at one file, not at every
    control file of its folder."""
    pids: list[int] = []
    folders = [folder]
    while folders:
        path = folders.pop()
        if populated(path) is False:  # before its listing: a cgroup folder lists some thirty control files
            continue
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                # 0: a member this PID namespace cannot see (never a pid to signal: kill(0) is our own group)
                pids.extend(pid for word in f.read().split() if (pid := int(word)) > 1)
            with os.scandir(path) as entries:
                folders.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))
        except (OSError, ValueError):
            continue
    return pids


def _kill(pid: int) -> None:
    if pid <= 1:  # never our own group (0), init (1) or everything (-1)
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def kill_folder(folder: str) -> None:
    for path in (os.path.join(folder, "cgroup.kill"), os.path.join(folder, "pids.max")):
        try:
            with open(path, "w") as f:  # cgroup.kill: all at once; pids.max 0 (v1): no more forks
                f.write("1" if path.endswith("kill") else "0")
            break
        except OSError:
            continue
    for _ in range(KILL_ROUNDS):
        pids = folder_members(folder)
        if not pids:
            break
        for pid in pids:
            _kill(pid)
        time.sleep(ROUND_PAUSE)
    for path, _, _ in sorted(os.walk(folder), key=lambda item: -len(item[0])):
        try:
            os.rmdir(path)
        except OSError:
            pass


def _group_and_environ(pid: int) -> tuple[int, bytes]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            group = int(f.read().rpartition(b")")[2].split()[2])  # state, ppid, pgrp, session, ...
        with open(f"/proc/{pid}/environ", "rb") as f:
            return group, f.read()
    except (OSError, ValueError, IndexError):
        return -1, b""


def kill_runs(runs: dict[int, str], marker: str) -> None:
    markers = {f"{marker}={run_id}".encode() for run_id in runs.values()}
    me = os.getpid()
    for _ in range(KILL_ROUNDS):
        found = False
        for group in runs:
            try:
                os.killpg(group, signal.SIGKILL)
                found = True
            except OSError:
                pass
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            group, environ = _group_and_environ(int(entry))
            if group in runs or markers.intersection(environ.split(b"\0")):
                _kill(int(entry))
                found = True
        if not found:
            return
        time.sleep(ROUND_PAUSE)


def _never_preempt() -> None:
    """A batch process for the scheduler: woken by a line, it waits for the core it lands on instead of taking
    it from what runs there. Each forked test wakes the watchdog (the run registered by the child and by the
    supervisor, released at its end), and each wake took the test's child off its core, or pytest's, for up to
    a few tenths of a millisecond, on two cores. Its share of the processor is a normal process's, so it still
    kills promptly on a busy machine. Unprivileged: a process may always make itself a batch one."""
    setscheduler = getattr(os, "sched_setscheduler", None)
    batch = getattr(os, "SCHED_BATCH", None)
    if setscheduler is not None and batch is not None:
        try:
            setscheduler(0, batch, os.sched_param(0))
        except OSError:
            pass  # refused (a sandbox): the watchdog works as before


def run_line(group: int, run_id: str) -> str:
    """The line that registers a run (its process group and its marker's value), without its newline."""
    return f"run {group} {run_id}"


def main() -> None:
    # The run marker's variable name comes as the argument: this file runs without the package on its path.
    watch(sys.stdin.buffer, sys.argv[1])


def watch(lines: Iterable[bytes], marker: str) -> None:
    """Read the supervisor's lines to the end of the pipe, then kill what is still registered. Also run, without
    an interpreter of its own, by a watchdog forked before anything else of lifeguard (lifeguard.run.headstart)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)  # only the end of the pipe ends us
    _never_preempt()
    folders: list[str] = []
    runs: dict[int, str] = {}
    members: dict[int, dict[int, int]] = {}  # run's group -> pid -> start time
    for raw in lines:
        line = raw.decode(errors="surrogateescape").rstrip("\n")
        words = line.split()
        if line.startswith("cgroup "):
            folders.append(line.partition(" ")[2])  # a path may hold spaces
        elif len(words) == 3 and words[0] == "run" and words[1].isdigit():
            runs[int(words[1])] = words[2]
        elif len(words) == 4 and words[0] == "member" and all(w.isdigit() for w in words[1:]):
            members.setdefault(int(words[1]), {})[int(words[2])] = int(words[3])
        elif len(words) == 2 and words[0] == "done" and words[1].isdigit():
            runs.pop(int(words[1]), None)
            members.pop(int(words[1]), None)
        elif line.startswith("released "):
            folders = [f for f in folders if f != line.partition(" ")[2]]
    for folder in folders:
        kill_folder(folder)
    if runs:
        kill_members({pid: start for group in runs for pid, start in members.get(group, {}).items()})
        kill_runs(runs, marker)


def kill_members(members: dict[int, int]) -> None:
    """SIGKILL each recorded member still running as the process it was (the same start time)."""
    for pid, start in members.items():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            if int(fields[19]) == start:
                _kill(pid)
        except (OSError, ValueError, IndexError):
            continue


if __name__ == "__main__":
    main()
