"""From what a run left behind (exit status, result channel, output) to its outcome and phase."""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from lifeguard.child import protocol
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Corruption, Event, Leftover, RunResult, signal_name
from lifeguard.model.run import RunKind, RunSpec, StartMode
from lifeguard.run.launch import RunFiles

if TYPE_CHECKING:  # stacks are read only for a run that failed: a passing session never imports them
    from lifeguard.model.stacks import ProcessStacks

TAIL_BYTES = 8 * 1024

# The result channel is the child's to write, and a child may write anything there: one 300 MiB line took the
# supervisor to 2.4 GB and went into report.json and results.jsonl whole. What the supervisor reads is bounded.
# One event line: the bootstrap's largest (atexit-done's 200 extension modules, a fork's inventory of 64
# threads) is about 10 KiB. A longer line is cut to this, marked, and the rest of it skipped, never read whole.
EVENT_LINE_BYTES = 64 * 1024
# The events one run keeps (its result, report.json): this many lines and bytes; later ones are counted and
# dropped (a note says how many), except the vital ones below.
MAX_EVENTS = 200
EVENTS_BYTES = 256 * 1024
# Past that budget a run still keeps the events its outcome and phase rest on (body-start, body-end, atexit-done,
# forked, corrupted...: a body that wrote thousands of notes and then crashed at exit still crashed at exit),
# each without its lists and with its text cut to VITAL_TEXT_CHARS, up to MAX_VITAL_EVENTS of them.
MAX_VITAL_EVENTS = 1000
VITAL_TEXT_CHARS = 200
VITAL_EVENTS = frozenset({protocol.STARTED, protocol.BODY_START, protocol.BODY_END, protocol.BODY_ERROR,
                          protocol.ATEXIT_DONE, protocol.FORKED, protocol.FORK_CHILD, protocol.FORK_CHILD_EXIT,
                          protocol.ATTACHED, protocol.CORES_ON, protocol.CORRUPTED, protocol.PYTEST_OUTCOME,
                          protocol.PROBE_EXERCISED})
SKIP_CHUNK = 1024 * 1024  # read size while skipping the rest of a cut line
assert EVENT_LINE_BYTES * 4 <= EVENTS_BYTES  # a run keeps several lines of the longest kind
# The start of every line child.emit writes (a JSON object whose first keys are these; a Python literal from
# a run of an earlier lifeguard): what a cut line still says.
_CUT_HEAD = re.compile(rb"\{([\"'])" + protocol.EVENT_KEY.encode() + rb"\1: \1([^\"'\\]*)\1, \1pid\1: (\d+), "
                       rb"\1time\1: ([0-9.eE+-]+)(?:, \1([^\"'\\]+)\1: (.*))?", re.DOTALL)

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


@dataclass
class Channel:
    """What the supervisor read of a run's result channel: the events kept, and what was cut or dropped."""

    events: list[Event] = field(default_factory=list)
    cut_lines: int = 0  # lines longer than EVENT_LINE_BYTES, kept cut
    longest: int = 0  # bytes of the longest line
    dropped: int = 0  # events past the budget, not kept
    dropped_bytes: int = 0
    malformed: int = 0  # lines that are no event lifeguard wrote (not JSON, or the wrong shape)
    bad_fields: int = 0  # fields of an event with a type lifeguard never writes, dropped from it

    def note(self) -> str | None:
        """One line for the run's notes when anything was cut, dropped or malformed."""
        parts = []
        if self.malformed:
            parts.append(f"{self.malformed} line(s) that are not events of lifeguard's ignored")
        if self.bad_fields:
            parts.append(f"{self.bad_fields} event field(s) of the wrong type dropped")
        if self.cut_lines:
            parts.append(f"{self.cut_lines} event line(s) longer than {EVENT_LINE_BYTES} bytes cut to that "
                         f"(the longest had {self.longest} bytes)")
        if self.dropped:
            parts.append(f"{self.dropped} event(s) ({self.dropped_bytes} bytes) past the {MAX_EVENTS} events or "
                         f"{EVENTS_BYTES} bytes a run keeps dropped")
        if not parts:
            return None
        return f"result channel: {'; '.join(parts)} (a failed run's folder keeps {protocol.EVENTS_FILE} whole)"


def read_channel(path: Path) -> Channel:
    """The result channel (one JSON object a line, see child.emit), read within its bounds: at most
    EVENT_LINE_BYTES of a line, MAX_EVENTS and EVENTS_BYTES of kept events, vital events past them slimmed."""
    channel = Channel()
    kept_bytes = vital = 0
    try:
        with open(path, "rb") as f:
            while line := f.readline(EVENT_LINE_BYTES):
                size = len(line)
                if size == EVENT_LINE_BYTES and not line.endswith(b"\n"):
                    size += _skip_line(f)
                    channel.cut_lines += 1
                    event = _cut_event(line, size)
                else:
                    event = _parse(line, channel)
                channel.longest = max(channel.longest, size)
                if event is None:
                    continue  # a line cut short by a crash mid-write, or no event at all
                kept = min(size, EVENT_LINE_BYTES)
                if len(channel.events) < MAX_EVENTS and kept_bytes + kept <= EVENTS_BYTES:
                    channel.events.append(event)
                    kept_bytes += kept
                elif event.name in VITAL_EVENTS and vital < MAX_VITAL_EVENTS:
                    channel.events.append(_slim(event))
                    vital += 1
                else:
                    channel.dropped += 1
                    channel.dropped_bytes += size
    except OSError:
        pass
    return channel


def read_events(path: Path) -> list[Event]:
    """The events of the result channel, within its bounds (read_channel)."""
    return read_channel(path).events


# The fields lifeguard reads from events, as the child writes them. The result channel is the program's to
# write too: a field of any other type (a hostile or broken program) is dropped from its event, never read.
_NONE = type(None)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "child": (int,), "status": (int,), "parent": (int,), "forking_thread": (int, _NONE), "main_thread": (int,),
    "thread": (int,), "generation": (int, _NONE), "data_len": (int,), "message": (str,), "data_hex": (str,),
    "error": (str,), "exit": (str,), "thread_name": (str,), "outcome": (str,), "reason": (str,), "cwd": (str,),
    "executable": (str,), "python": (list,), "argv": (list,), "extensions": (list,), "parent_threads": (list,),
    "stack": (list,), "why": (str,),
}


def _typed(key: str, value: Any) -> bool:
    types = FIELD_TYPES.get(key)
    if types is None:
        return True
    if isinstance(value, bool) or not isinstance(value, types):
        return False
    if isinstance(value, list) and key == "parent_threads":
        return all(isinstance(t, dict) and isinstance(t.get("tid"), int) for t in value)
    if isinstance(value, list):  # extensions, argv, stack: names
        return key == "python" or all(isinstance(item, str) for item in value)
    return True


def _parse(line: bytes, channel: Channel) -> Event | None:
    try:
        if line.startswith(b'{"'):  # JSON, as child.emit writes it
            record = json.loads(line)
        else:  # a Python literal, as an earlier lifeguard wrote it
            record = ast.literal_eval(line.decode(errors="replace"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):  # json's errors are ValueErrors
        if line.endswith(b"\n"):  # a whole line that is no event (one cut short by a crash is not counted)
            channel.malformed += 1
        return None
    if not isinstance(record, dict):
        channel.malformed += 1
        return None
    name, pid, when = record.get(protocol.EVENT_KEY), record.get("pid"), record.get("time")
    if (not isinstance(name, str) or not isinstance(pid, int) or isinstance(pid, bool)
            or not isinstance(when, (int, float, _NONE)) or isinstance(when, bool)):
        channel.malformed += 1
        return None
    fields = {key: value for key, value in record.items() if key not in (protocol.EVENT_KEY, "pid", "time")}
    typed = {key: value for key, value in fields.items() if _typed(key, value)}
    channel.bad_fields += len(fields) - len(typed)
    return Event(name, pid, when, typed)


def _skip_line(f: BinaryIO) -> int:
    """Read past the rest of a line, a chunk at a time; the bytes skipped."""
    skipped = 0
    while chunk := f.readline(SKIP_CHUNK):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _cut_event(head: bytes, size: int) -> Event | None:
    """A line too long to keep: its event, pid and time, and the start of its first field, marked as cut."""
    match = _CUT_HEAD.match(head)
    if match is None:
        return None
    _, name, pid, when, key, value = match.groups()
    try:
        fields: dict[str, Any] = {"cut": size}
        if key is not None:
            text = value.decode(errors="replace").lstrip("'\"")
            fields[key.decode()] = f"{text} [... line of {size} bytes cut to {EVENT_LINE_BYTES}]"
        return Event(name.decode(errors="replace"), int(pid), float(when), fields)
    except ValueError:
        return None


def _slim(event: Event) -> Event:
    """A vital event past the budget: its text fields cut short, its lists and dicts left out."""
    fields = {k: v[:VITAL_TEXT_CHARS] if isinstance(v, str) else v for k, v in event.fields.items()
              if isinstance(v, (str, int, float, bool)) or v is None}
    return Event(event.name, event.pid, event.time, fields)


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
    """(pid, exit code) of the first forked child the main process saw fail (negative code: its signal)."""
    for event in events:
        if event.name == protocol.FORK_CHILD_EXIT and event.pid == main_pid:
            status = event.get("status")
            if isinstance(status, int) and status != 0:
                return int(event.get("child", 0)), status
    return None


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
             channel: Path | None = None) -> RunResult:
    """The run's outcome, phase and reason; ``status_lost``: why the exit status of a run that exited is
    unknown (``rc`` is None then); ``ended_early``: the settle period after which the supervisor ended a
    hung run before its deadline (every thread blocked, no CPU time), else None; ``channel``: where to read
    the result channel (the supervisor's own descriptor of it), if not at its path."""
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
        if fatal:
            reason += f" after 'Fatal Python error: {fatal.group(1)}'"
        if known and exited_atexit(events, main_pid):
            phase = Phase.EXIT  # a body that raised, then a process that died after its atexit callbacks
    elif child_status is not None and child_status[1] < 0 and spec.kind is not RunKind.COMMAND:
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
        if child_status is not None and child_status[1] > 0:
            phase = Phase.FORK_CHILD  # the body failed because its forked child did
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
    )
