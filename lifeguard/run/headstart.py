"""The head start: a wrapped command starts before the rest of lifeguard is imported.

``lifeguard run [-q] [-v] [-x] [--color WHEN] [--timeout S] [--expect E] -- COMMAND [ARGS...]`` wraps a
program (a CI step, ``python3 script.py``) whose own time is what its user waits for, and importing
lifeguard's supervisor, diagnosis and reports takes about a tenth of a second before a run could start. So
the command line's entry point (lifeguard.cli.entry) calls ``begin()`` first, with nothing of lifeguard
imported but this module: it starts the run's process as a normal start would (the same command, working
folder, environment and descriptors, its own session, core dumps off), after the watchdog has been told of
it (so a lifeguard killed at any moment takes the run's tree with it); the rest of lifeguard is imported
while the program runs.

The normal start stays the authority. When the supervisor reaches the run (lifeguard.run.supervise), it
computes the process it would start and ``claim()`` hands the head start over only if it is that very
process (command, folder and every environment entry compared); otherwise the head start is killed and
the run starts as usual: slower, never different. The run is tracked by ancestry (lifeguard.proc.membership:
this process is the subreaper before the run's own code can fork), since it was started before the
session's cgroup existed.
Anything unusual on the way (an option the head start does not know, a command it cannot find, a cache
that cannot be written) means no head start, never an error: the normal start then says what is wrong.

Standard library (os, sys, ctypes, _random, _signal, resource) and a few small lifeguard modules only (child,
cache, model.seeds, run.childpath, run.headstart_process, proc.reap).
"""

from __future__ import annotations

import os

from lifeguard.cache import session_folder
from lifeguard.child import event_marker, protocol
from lifeguard.model.seeds import run_seed
from lifeguard.run import childpath
from lifeguard.run.headstart_process import VARIANT, HeadStart, end, find, open_files, spawn

# The options of `lifeguard run` that change nothing of how the run's process starts (everything else
# means a normal start): flags, and options with a value (``--timeout 5`` or ``--timeout=5``).
FLAGS = frozenset({"-q", "--quiet", "-v", "--verbose", "-x", "--exitfirst"})
VALUE_OPTIONS = frozenset({"--timeout", "--expect", "--color"})
# A command's name as its run's folder spells it unchanged (lifeguard.model.scenario.evidence_name).
NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
NAME_LIMIT = 80
START_WAIT = 0.2  # let_it_start: at most this long (a Python interpreter starts in tens of milliseconds)
START_POLL = 0.001
START_READ = 4096  # the first events of the run's main process are well within this


_pending: list[HeadStart] = []  # the one head start of this process, until claimed or discarded
_made: list[HeadStart] = []  # every head start this process made (for -v and the tests)


def begin(argv: list[str]) -> HeadStart | None:
    """Start the run of ``lifeguard run ... -- COMMAND`` now, if this command line is one the head start
    knows; None (and nothing started) otherwise."""
    if os.environ.get(protocol.HEADSTART_ENV, "") == "0" or os.environ.get(protocol.CHILD_ENV):
        return None
    command = _command_of(argv)
    if command is None or find(command[0]) is None:
        return None
    name = os.path.basename(command[0])
    if not name or len(name) > NAME_LIMIT or not set(name) <= NAME_CHARACTERS:
        return None
    head: HeadStart | None = None
    try:
        head = HeadStart(command, name, session_folder(), os.urandom(16).hex(), int.from_bytes(os.urandom(4), "little"))
        open_files(head)
        head.env = _environment(head)
        spawn(head)
    except Exception:  # no head start, whatever went wrong: the normal start will say it, if it matters
        if head is not None:
            end(head)
        return None
    import atexit

    atexit.register(discard)  # a usage error, Ctrl-C during the imports: nothing may outlive lifeguard
    _pending.append(head)
    _made.append(head)
    return head


def let_it_start(head: HeadStart | None) -> None:
    """Wait (at most START_WAIT) until a Python command's own code is about to run (its attach hook wrote
    BODY_START on the result channel), or it ended. The rest of lifeguard loads after that: loading while
    the program's interpreter starts slows both on a machine of two cores (hyperthreads, a shared VM) by a
    few milliseconds; afterwards the program computes on one core while lifeguard loads on the other."""
    if head is None or not head.python:
        return
    import time

    marker = event_marker(protocol.BODY_START)
    path = os.path.join(head.run_dir, protocol.EVENTS_FILE)
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as f:
                if marker in f.read(START_READ):
                    return
            if os.waitid(os.P_PID, head.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return  # it ended before its body (not reaped: its supervisor reads the status later)
        except (OSError, ChildProcessError):
            return
        time.sleep(START_POLL)


def pending() -> HeadStart | None:
    return _pending[0] if _pending else None


def base_seed(given: int | None) -> int | None:
    """The session's base seed: ``given`` (--base-seed), else the one the pending head start's run has its
    seed from (the plan derives that seed again and must find the same), else None (a random one)."""
    head = pending()
    return given if given is not None or head is None else head.base_seed


def made() -> HeadStart | None:
    """This process's head start, claimed or not (for ``lifeguard run -v``)."""
    return _made[0] if _made else None


def claim(argv: list[str], cwd: str, env: dict[str, str]) -> HeadStart | None:
    """The head start, if it is the process a normal start would start with ``argv`` in ``cwd`` with ``env``;
    else it is killed and None returned (a normal start follows)."""
    head = pending()
    if head is None:
        return None
    _pending.clear()
    differs = _difference(head, argv, cwd, env)
    if differs:
        head.outcome = f"not used: {differs}"
        end(head, keep_folder=True)  # the session's runs go to its folder all the same
        return None
    head.outcome = "used: the command started before lifeguard's own modules were imported"
    return head


def take_watchdog() -> tuple[int, int] | None:
    """The head start's watchdog (pid, pipe), for the session's containment to keep."""
    head = made()
    if head is None or head.watchdog is None:
        return None
    watchdog, head.watchdog = head.watchdog, None
    return watchdog


def discard() -> None:
    """Kill a head start nobody claimed (the session ended before its run: a usage error, Ctrl-C)."""
    head = pending()
    if head is None:
        return
    _pending.clear()
    head.outcome = "not used: the session ended before its run"
    end(head)


def _difference(head: HeadStart, argv: list[str], cwd: str, env: dict[str, str]) -> str:
    if list(argv) != head.argv:
        return "another command"
    if os.path.realpath(cwd) != os.path.realpath(head.cwd):
        return "another working folder"
    names = sorted(name for name in set(env) | set(head.env) if env.get(name) != head.env.get(name))
    return f"the environment differs ({', '.join(names)})" if names else ""


def _command_of(argv: list[str]) -> list[str] | None:
    """The command of ``run [KNOWN OPTIONS] -- COMMAND [ARGS...]``, else None."""
    if not argv or argv[0] != "run":
        return None
    position = 1
    while position < len(argv):
        word = argv[position]
        if word == "--":
            return list(argv[position + 1:]) or None
        name, equals, _ = word.partition("=")
        if word in FLAGS:
            position += 1
        elif name in VALUE_OPTIONS:
            position += 1 if equals else 2
        else:
            return None
    return None


def _environment(head: HeadStart) -> dict[str, str]:
    """What a normal start gives a plain command's run (lifeguard.run.launch.child_env, the plan's seed
    entries of lifeguard.plan.perturbations.supervisor_side): checked entry by entry when it is claimed."""
    seed = run_seed(head.base_seed, head.name, VARIANT, 0)
    attach: protocol.AttachSpec = {"run_dir": head.run_dir, "dump_signal": int(_dump_signal()), "cores": True,
                                   "seed": seed, "perturbations": []}
    inherited = os.environ.get("PYTHONPATH")
    env = dict(os.environ)
    env.update({
        "PYTHONHASHSEED": str(seed % (2**32 - 1)), protocol.SEED_ENV: str(seed),
        protocol.RUN_ID_ENV: head.run_id, protocol.VARIANT_ENV: VARIANT,
        protocol.EVENTS_FD_ENV: str(head.events_fd),
        protocol.EVENTS_PATH_ENV: os.path.join(head.run_dir, protocol.EVENTS_FILE),
        protocol.ATTACH_ENV: repr(attach),
        "PYTHONPATH": childpath.site_hook_folder() + (os.pathsep + inherited if inherited else ""),
        "PYTHONFAULTHANDLER": "1",
    })
    return env


def _dump_signal() -> int:
    import _signal  # signal.py itself imports enum: milliseconds before the run's process could start

    return int(_signal.SIGUSR2)  # lifeguard.run.launch.DUMP_SIGNAL


