"""What a gdb run printed, made into ``ProcessStacks``.

gdb_script.py prints one JSON record per line behind a marker (``LIFEGUARD-TARGET``,
``-THREAD``, ``-NOTE``, ``-ERROR``, ``-DONE``); everything else gdb prints is noise,
except the tail of stderr when no capture came out.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal, TypedDict, cast

from lifeguard.capture.bounded import ToolRun
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import Backend, Frame, ProcessStacks, ThreadStack, infer_gil
from lifeguard.proc.procfs import ProcessIdentity, thread_name

MARKER = "LIFEGUARD-"
STDERR_TAIL_LINES = 5
PTRACE_HINT = (
    "is another debugger attached? Otherwise attaching needs root, CAP_SYS_PTRACE, "
    "or /proc/sys/kernel/yama/ptrace_scope set to 0"
)

CaptureMode = Literal["live", "core", "replay"]


class TargetRecord(TypedDict, total=False):
    """``LIFEGUARD-TARGET``: what gdb attached to or loaded; the keys depend on the mode."""

    pid: int
    mode: CaptureMode
    core: str
    python_gdb: bool
    gil_locked: bool | None
    gil_holder: int | None  # pthread_t of the GIL's last holder
    signal: dict[str, Any] | None  # SignalInfo.to_dict's shape
    psargs: str  # a core's command line, cut at 80 bytes by the kernel


class ThreadRecord(TypedDict):
    """``LIFEGUARD-THREAD``: one thread, frames innermost first."""

    tid: int
    num: int
    name: str | None
    handle: int | None  # pthread_t
    frames: list[dict[str, Any]]  # Frame.to_dict's shape


# What one gdb process left: the shared record of a bounded tool run.
GdbRun = ToolRun


@dataclasses.dataclass
class _Parsed:
    target: TargetRecord | None = None
    threads: list[ThreadRecord] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    done: bool = False


def _parse_output(stdout: str) -> _Parsed:
    parsed = _Parsed()
    for line in stdout.splitlines():
        if not line.startswith(MARKER):
            continue
        kind, _, payload = line[len(MARKER) :].partition(" ")
        try:
            record: dict[str, Any] = json.loads(payload) if payload else {}
        except json.JSONDecodeError:
            continue  # a line cut by a timeout kill
        # The records are what gdb_script.py writes: its shapes are the TypedDicts above.
        if kind == "TARGET":
            parsed.target = cast(TargetRecord, record)
        elif kind == "THREAD":
            parsed.threads.append(cast(ThreadRecord, record))
        elif kind == "NOTE":
            parsed.notes.append(str(record.get("message")))
        elif kind == "ERROR":
            parsed.error = str(record.get("message"))
        elif kind == "DONE":
            parsed.done = True
    return parsed


def _stderr_tail(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return " | ".join(lines[-STDERR_TAIL_LINES:])


def build_stacks(
    pid: int | None,
    info: ProcessIdentity,
    run: GdbRun,
    *,
    mode: CaptureMode,
    timeout: float,
    thread_names_from_proc: bool,
) -> ProcessStacks:
    """The backtraces of one gdb run, or why there are none (``error``)."""
    parsed = _parse_output(run.stdout)
    target = parsed.target or {}
    if pid is None:  # a core or a replay: the process's pid as gdb read it from the target
        pid = int(target.get("pid") or 0)
    gil_locked = target.get("gil_locked")
    gil_holder = target.get("gil_holder")
    threads = []
    for record in parsed.threads:
        frames = tuple(Frame.from_dict(f) for f in record.get("frames", ()))
        tid = int(record["tid"])
        name = thread_name(pid, tid) if thread_names_from_proc else None
        pthread_id = record.get("handle")
        threads.append(
            ThreadStack(
                tid=tid,
                name=name or record.get("name"),
                gil=infer_gil(frames, pthread_id, gil_locked, gil_holder),
                frames=frames,
                pthread_id=pthread_id,
            )
        )
    error = parsed.error
    if error and "Operation not permitted" in error:
        error += f" ({PTRACE_HINT})"
    if run.timed_out:
        error = f"gdb timed out after {timeout:g}s ({len(threads)} threads captured before)"
    elif error is None and not parsed.done:
        tail = _stderr_tail(run.stderr)
        error = f"gdb ended without a capture (exit status {run.returncode}): {tail or 'no output'}"
    backend = Backend(mode) if mode in (Backend.CORE.value, Backend.REPLAY.value) else Backend.GDB
    signal_record = target.get("signal")
    if not info.cmdline and target.get("psargs"):
        info = dataclasses.replace(info, cmdline=tuple(target["psargs"].split()))
    return ProcessStacks(
        pid=pid,
        ppid=info.ppid,
        exe=info.exe,
        cmdline=info.cmdline,
        backend=backend,
        python_gdb=bool(target.get("python_gdb")),
        threads=tuple(threads),
        error=error,
        signal=SignalInfo.from_dict(signal_record) if signal_record else None,
        notes=tuple(parsed.notes),
        duration=round(run.duration, 3),
    )
