"""How a run's main process becomes the run's: a process group of its own, and the run's cgroup.

It waits until the supervisor has moved it into the run's cgroup, before any of the run's own code (a
scenario, a script, the program a command starts) can run and fork.

Moving a process between cgroups costs the kernel an RCU grace period (10-20 ms here) the first time in a
while, so the supervisor does it while the child's interpreter starts, not before exec; this wait, at the
top of the bootstrap and of the attach hook, keeps the membership airtight all the same. A process already
in the folder (every descendant: the cgroup is inherited) passes at once.
"""

import os
import time

from lifeguard.child import protocol

JOIN_WAIT = 5.0  # the supervisor's move takes milliseconds; past this the run goes on (the supervisor says why)


def own_process_group() -> None:
    """Lead a process group of one's own, in the session lifeguard was started in, as a shell starts a job:
    the tree's kill reaches the group and the terminal's Ctrl-C does not. Not a session of its own: that is
    a scheduler group of its own too (autogroup), and the timing of exit races changes with it (a thread
    entering Python at exit crashed half as often in a new session)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader


def wait_for_cgroup() -> None:
    """Until the supervisor has moved this process into the run's cgroup. One started without a death signal
    (protocol.SUPERVISOR_ENV) ends here if the supervisor is gone first: out of the folder, no watchdog would
    kill it."""
    supervisor = os.environ.pop(protocol.SUPERVISOR_ENV, "")
    wanted = os.environ.get(protocol.CGROUP_ENV)
    if not wanted:
        return
    controllers, _, folder = wanted.partition(":")
    deadline = time.monotonic() + JOIN_WAIT
    pause = 0.0002
    while True:
        try:
            with open("/proc/self/cgroup") as f:
                for line in f:
                    _, names, path = line.rstrip("\n").split(":", 2)
                    if names == controllers and (path == folder or path.startswith(folder + "/")):
                        return
        except OSError:
            return  # no /proc: nothing to wait for
        if supervisor.isdigit() and os.getppid() != int(supervisor):
            os._exit(1)
        if time.monotonic() > deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
