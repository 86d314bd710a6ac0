"""From what a run left behind (exit status, result channel, output) to its outcome and phase."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from lifeguard.child import protocol
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Corruption, Event, Leftover, RunResult, signal_name
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.run.channel import read_channel
from lifeguard.run.launch import RunFiles

if TYPE_CHECKING:  # stacks are read only for a run that failed: a passing session never imports them
    from lifeguard.model.stacks import ProcessStacks

TAIL_BYTES = 8 * 1024

FATAL_RE = re.compile(r"^Fatal Python error: (.*)$", re.MULTILINE)
# Signals that mean a crash when a shell reports them as exit code 128 + N for a process it ran.
CRASH_SIGNALS = frozenset({4, 5, 6, 7, 8, 11, 31})  # SIGILL SIGTRAP SIGABRT SIGBUS SIGFPE SIGSEGV SIGSYS
SHELL_SIGNAL_BASE = 128


def _tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return text if size <= limit else "[...]\n" + text.partition("\n")[2]


def lead_pid(events: list[Event], main_pid: int) -> int:
    """The process whose events give a run's phase: the main one, or, when it reported nothing (a command's
    shell), the first Python process that attached to the run and was not forked from another."""
    if any(e.pid == main_pid for e in events):
        return main_pid
    forked = {e.pid for e in events if e.name == protocol.FORKED}
    for event in events:
        if event.name == protocol.ATTACHED and event.pid is not None and event.pid not in forked:
            return event.pid
    return main_pid


def phase_of(events: list[Event], main_pid: int) -> Phase:
    mine = {e.name for e in events if e.pid == main_pid}
    if protocol.BODY_ERROR in mine:
        return Phase.RUN
    if protocol.BODY_END in mine:
        return Phase.EXIT
    if protocol.BODY_START in mine:
        return Phase.RUN
    return Phase.IMPORT


def exited_atexit(events: list[Event], main_pid: int) -> bool:
    """Did the main process get through its atexit callbacks (lifeguard's last one ran)? What kills it after
    that kills it in its exit, whatever its body did (a body that raised still ends, then the process exits)."""
    return any(e.name == protocol.ATEXIT_DONE and e.pid == main_pid for e in events)


def ended_early_text(settle: float) -> str:
    """What a hung run's reason says when the supervisor ended it before its deadline."""
    return f"ended early: every thread blocked for {settle:.1f} s, no CPU time"


def _fork_child_status(events: list[Event], main_pid: int) -> tuple[int, int] | None:
    """(pid, exit code; negative: its signal) of the forked child of the main process whose end explains the
    run: one its probe saw fail, else the first the kernel saw die of a crash signal, else the first that ended
    otherwise non-zero (a SIGTERM from a pool's terminate() is no crash: it only explains a failed run)."""
    ends = [(int(child), status, event.get("by") == "kernel") for event in events
            if event.name == protocol.FORK_CHILD_EXIT and event.pid == main_pid
            and isinstance(status := event.get("status"), int) and not isinstance(status, bool) and status != 0
            and isinstance(child := event.get("child", 0), int)]
    ranked = ([end for end in ends if not end[2]] + [end for end in ends if end[2] and -end[1] in CRASH_SIGNALS]
              + [end for end in ends if end[2]])
    return (ranked[0][0], ranked[0][1]) if ranked else None


def _crash_of_child(status: tuple[int, int] | None, events: list[Event], main_pid: int) -> bool:
    """Did the child's end mean a crash: a signal a probe saw, or a crash signal the kernel reported."""
    if status is None or status[1] >= 0:
        return False
    probe_saw = any(e.name == protocol.FORK_CHILD_EXIT and e.pid == main_pid and e.get("by") != "kernel"
                    and e.get("child") == status[0] for e in events)
    return probe_saw or -status[1] in CRASH_SIGNALS


def incomplete_life(spec: RunSpec, events: list[Event], main_pid: int) -> tuple[Phase, str] | None:
    """Why a run that exited with 0 on its own did not live a whole life, or None when it did: a pass needs
    the body's own end and the interpreter's exit (lifeguard's last atexit callback ran: finalization
    follows). A command is judged by its exit status alone; a fast-exit fork run skips finalization by design."""
    if spec.kind is RunKind.COMMAND:
        return None
    mine = [e for e in events if e.pid == main_pid]
    names = {e.name for e in mine}
    exits = [e for e in mine if e.name == protocol.OS_EXIT]
    called = ""
    if exits:
        stack = exits[-1].get("stack") or []
        called = f": os._exit({exits[-1].get('status')}) called" + (f" at {stack[0]}" if stack else "")
    if protocol.BODY_END not in names:
        phase = Phase.RUN if protocol.BODY_START in names else Phase.IMPORT
        where = "the body returned" if phase is Phase.RUN else "the body started"
        return phase, f"exited with code 0 before {where}{called}"
    if protocol.ATEXIT_DONE not in names and spec.mode is not StartMode.FORK_FAST:
        return Phase.EXIT, f"exited with code 0 without finalizing (its atexit callbacks did not all run){called}"
    return None


def classify(spec: RunSpec, files: RunFiles, main_pid: int, rc: int | None, duration: float, *, hung: bool,
             status_lost: str | None = None, hung_pids: list[int], python_stacks: dict[str, str],
             backtraces: list[ProcessStacks], leftovers: list[Leftover], phase_at_deadline: Phase | None = None,
             notes: tuple[str, ...] = (), ended_early: float | None = None,
             channel: Path | None = None, oom_kills: int = 0) -> RunResult:
    """The run's outcome, phase and reason; ``status_lost``: why the exit status of a run that exited is
    unknown (``rc`` is None then); ``ended_early``: the settle period after which the supervisor ended a
    hung run before its deadline (every thread blocked, no CPU time), else None; ``channel``: where to read
    the result channel (the supervisor's own descriptor of it), if not at its path; ``oom_kills``: the
    kernel's out-of-memory kills while the run lived."""
    run_dir = files.run_dir
    read = read_channel(channel or files.events)
    events = read.events
    if (channel_note := read.note()) is not None:
        notes = (*notes, channel_note)
    stderr_tail = _tail(files.stderr)
    stdout_tail = _tail(files.stdout)
    main_pid = lead_pid(events, main_pid)
    # A command none of whose processes reported anything (no Python, or one started with -I/-S) has no
    # known phase: "import" would be a guess.
    known = spec.kind is not RunKind.COMMAND or any(e.pid == main_pid for e in events)
    phase: Phase | None = phase_of(events, main_pid) if known else None
    signum = -rc if rc is not None and rc < 0 else None
    shell_crash = (spec.kind is RunKind.COMMAND and rc is not None and rc - SHELL_SIGNAL_BASE in CRASH_SIGNALS)
    fatal = FATAL_RE.search(stderr_tail)
    corruption = [e for e in events if e.name == protocol.CORRUPTED]
    forked = {e.pid for e in events if e.name == protocol.FORKED}
    forked |= {int(e.get("child", 0)) for e in events if e.name == protocol.FORK_CHILD and e.pid == main_pid}
    child_status = _fork_child_status(events, main_pid)
    if hung:
        outcome = Outcome.HUNG
        phase = (phase_at_deadline or phase) if known else None
        if any(p in forked for p in hung_pids):
            phase = Phase.FORK_CHILD
        reason = f"deadline of {spec.timeout:g} s passed; {len(hung_pids)} process(es) alive"
        if ended_early is not None:
            reason = (f"{ended_early_text(ended_early)} (before the deadline of {spec.timeout:g} s); "
                      f"{len(hung_pids)} process(es) alive")
        elif spec.plain and phase is Phase.RUN:  # maybe only slow: a whole program (a test suite) needs its own
            reason += " (a program that needs longer: lifeguard run --timeout SECONDS ...)"
    elif signum is not None:
        outcome = Outcome.CRASHED
        reason = f"killed by {signal_name(signum)}"
        if signum == signal.SIGKILL and oom_kills:  # a run lifeguard let end: not lifeguard's own kill
            reason += (f", most likely by the kernel's out-of-memory killer (it killed {oom_kills} process(es) "
                       "while the run lived)")
        if fatal:
            reason += f" after 'Fatal Python error: {fatal.group(1)}'"
        if known and exited_atexit(events, main_pid):
            phase = Phase.EXIT  # a body that raised, then a process that died after its atexit callbacks
    elif _crash_of_child(child_status, events, main_pid) and spec.kind is not RunKind.COMMAND:
        assert child_status is not None
        # The main process reported a forked child killed by a signal: the crash is the child's.
        outcome = Outcome.CRASHED
        phase = Phase.FORK_CHILD
        signum = -child_status[1]
        reason = f"the forked child {child_status[0]} was killed by {signal_name(signum)}"
        if fatal:
            reason += f" after 'Fatal Python error: {fatal.group(1)}'"
    elif fatal:
        outcome = Outcome.CRASHED
        reason = f"Fatal Python error: {fatal.group(1)}"
        if forked and spec.kind is not RunKind.COMMAND:
            # The main process exited on its own (no signal), so the fatal error was a forked child's.
            phase = Phase.FORK_CHILD
            reason = f"a forked child printed 'Fatal Python error: {fatal.group(1)}'"
    elif shell_crash:
        assert rc is not None
        outcome = Outcome.CRASHED
        signum = rc - SHELL_SIGNAL_BASE
        reason = (f"exit code {rc}: a process of the command was killed by {signal_name(signum)} "
                  f"(as a shell reports it: {SHELL_SIGNAL_BASE} + {signum})")
    elif corruption:
        outcome = Outcome.CORRUPTED
        reason = f"scenario reported corruption: {corruption[0].get('message', '')}"
        first_pid = corruption[0].pid
        if first_pid != main_pid and first_pid in forked:
            phase = Phase.FORK_CHILD
        else:  # the phase the body was in when it saw the broken data
            phase = phase_of(events[: events.index(corruption[0])], main_pid)
    elif status_lost is not None:  # nothing above says how it ended, and the kernel's word is gone
        errors = [e for e in events if e.name == protocol.BODY_ERROR and e.pid == main_pid]
        outcome = Outcome.FAILED if errors else Outcome.ERROR  # the body said it failed: that much is known
        reason = f"{errors[0].get('error')} ({status_lost})" if errors else status_lost
    elif rc != 0 and child_status is None and (unused := protocol.not_exercised(events, main_pid)) is not None:
        outcome, phase, reason = Outcome.NOT_EXERCISED, None, unused  # ended on purpose: no phase of it failed
    elif rc != 0:
        outcome = Outcome.FAILED
        errors = [e for e in events if e.name == protocol.BODY_ERROR and e.pid == main_pid]
        reason = str(errors[0].get("error")) if errors else f"exit code {rc}"
        if child_status is not None:
            phase = Phase.FORK_CHILD  # the body failed because its forked child did
            child, code = child_status
            reason += (f"; before it, the forked child {child} "
                       + (f"exited with code {code}" if code > 0 else f"was killed by {signal_name(-code)}"))
    elif leftovers:
        outcome = Outcome.FAILED
        phase = Phase.EXIT
        names = ", ".join(f"{p.pid} ({p.comm}{', stopped' if p.stopped else ''})" for p in leftovers)
        what = "stopped processes" if all(p.stopped for p in leftovers) else "processes running"
        reason = f"left {what} after exit: {names}"
    elif (incomplete := incomplete_life(spec, events, main_pid)) is not None:
        outcome = Outcome.FAILED
        phase, reason = incomplete
    else:
        outcome = Outcome.PASSED
        phase = None
        reason = ""
    evidence = {path.name: str(path) for path in (files.stdout, files.stderr, files.events)}
    for pid in python_stacks:
        evidence[f"faulthandler-{pid}"] = str(run_dir / protocol.faulthandler_file(int(pid)))
    return RunResult(
        scenario=spec.scenario, variant=spec.variant, index=spec.index, outcome=outcome, phase=phase,
        expected=spec.expected, signal=signum, exit_code=rc, duration=round(duration, 4),
        python=spec.interpreter.version_text, run_dir=str(run_dir), reason=reason,
        fatal_error=fatal.group(1) if fatal else None,
        corruption=tuple(Corruption(e.pid, str(e.get("message", "")), str(e.get("data_hex", "")),
                                    int(e.get("data_len", 0))) for e in corruption),
        leftover_processes=tuple(leftovers), evidence=evidence, stdout_tail=stdout_tail, stderr_tail=stderr_tail,
        python_stacks=python_stacks, backtraces=tuple(backtraces),
        events=tuple(e for e in events if e.name != protocol.STARTED), notes=notes,
        seed=spec.seed, perturbations=tuple(spec.perturbations), mode=spec.mode, replay=spec.replay,
        oom_kills=oom_kills if signum == signal.SIGKILL else 0,
    )
