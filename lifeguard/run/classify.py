"""From what a run left behind (exit status, result channel, output) to its outcome and phase."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from lifeguard.child import protocol
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Corruption, Event, Leftover, RunResult, signal_name
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.run.launch import RunFiles

if TYPE_CHECKING:  # stacks are read only for a run that failed: a passing session never imports them
    from lifeguard.model.stacks import ProcessStacks

TAIL_BYTES = 8 * 1024
MAX_EVENTS = 200


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


def read_events(path: Path) -> list[Event]:
    """The result channel: one Python-literal dict a line (see child.emit)."""
    events: list[Event] = []
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    event = ast.literal_eval(line.decode(errors="replace"))
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue  # a line cut short by a crash mid-write
                if isinstance(event, dict) and protocol.EVENT_KEY in event:
                    events.append(Event.from_dict(event))
    except OSError:
        pass
    return events


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


def classify(spec: RunSpec, files: RunFiles, main_pid: int, rc: int | None, duration: float, *, hung: bool,
             hung_pids: list[int], python_stacks: dict[str, str], backtraces: list[ProcessStacks],
             leftovers: list[Leftover], phase_at_deadline: Phase | None = None,
             notes: tuple[str, ...] = ()) -> RunResult:
    run_dir = files.run_dir
    events = read_events(files.events)
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
    if hung:
        outcome = Outcome.HUNG
        phase = (phase_at_deadline or phase) if known else None
        if any(p in forked for p in hung_pids):
            phase = Phase.FORK_CHILD
        reason = f"deadline of {spec.timeout:g} s passed; {len(hung_pids)} process(es) alive"
        if spec.plain and phase is Phase.RUN:  # maybe only slow: a whole program (a test suite) needs its own
            reason += " (a program that needs longer: lifeguard run --timeout SECONDS ...)"
    elif signum is not None:
        outcome = Outcome.CRASHED
        reason = f"killed by {signal_name(signum)}"
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
    elif rc != 0:
        outcome = Outcome.FAILED
        errors = [e for e in events if e.name == protocol.BODY_ERROR and e.pid == main_pid]
        reason = str(errors[0].get("error")) if errors else f"exit code {rc}"
    elif leftovers:
        outcome = Outcome.FAILED
        phase = Phase.EXIT
        names = ", ".join(f"{p.pid} ({p.comm})" for p in leftovers)
        reason = f"left processes running after exit: {names}"
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
        events=tuple(e for e in events if e.name != protocol.STARTED)[:MAX_EVENTS], notes=notes,
        seed=spec.seed, perturbations=tuple(spec.perturbations), mode=spec.mode, replay=spec.replay,
    )
