"""One failed run's evidence as report.html shows it: processes and threads with their frames, the culprit
thread open, lifeguard's own and the interpreter's start-up frames marked (hidden behind the page's toggle),
Python and native frames told apart, and links to the evidence files, relative to the report folder.

The order and the choice of culprit threads are the terminal's (lifeguard.diagnose.view): the page shows the
same story, with every frame a click away instead of cut.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from lifeguard.child.protocol import is_bootstrap
from lifeguard.diagnose.view import (
    culprit_threads,
    forked_parents,
    innermost_meaningful,
    processes_by_relevance,
    thread_roles,
    trimmed_frames,
)
from lifeguard.model.result import RunResult, series_label
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack, is_harness_file

MAX_FILES = 40  # evidence files listed for one run (a run folder of a command may hold many cores)


@dataclass(frozen=True)
class FrameRow:
    text: str
    python: bool
    hidden: bool  # lifeguard's bootstrap, runpy, the interpreter's start-up: behind the toggle
    culprit: bool = False  # the innermost frame of code someone wrote, in a culprit thread


@dataclass(frozen=True)
class ThreadView:
    title: str
    role: str
    culprit: bool  # open on the page
    frames: tuple[FrameRow, ...]
    where: str  # its innermost meaningful frame, for the closed one-line form

    @property
    def hidden_count(self) -> int:
        return sum(1 for f in self.frames if f.hidden)


@dataclass(frozen=True)
class ProcessView:
    title: str
    open: bool
    lines: tuple[str, ...]  # killed by, capture errors, notes
    threads: tuple[ThreadView, ...]


@dataclass(frozen=True)
class EvidenceFile:
    name: str
    href: str


@dataclass
class RunEvidence:
    result: RunResult
    processes: list[ProcessView] = field(default_factory=list)
    files: list[EvidenceFile] = field(default_factory=list)
    dumps: list[tuple[str, list[tuple[str, bool]]]] = field(default_factory=list)  # pid, (line, harness)
    stderr: list[tuple[str, bool]] = field(default_factory=list)  # the tail, (line, harness)


def frame_text(frame: Frame) -> str:
    if frame.is_python:
        where = f"{frame.file}:{frame.line}" if frame.line is not None else f"{frame.file or '?'}"
        return f"{frame.function or '??'}  ({where})"
    source = ""
    if frame.file:
        source = f" at {frame.file}:{frame.line}" if frame.line is not None else f" at {frame.file}"
    library = f"  [{frame.library.rsplit('/', 1)[-1]}]" if frame.library else ""
    address = f"{frame.address} " if frame.address and not frame.inline else ""
    return f"{address}{frame.function or '??'}{source}{library}"


def _frame_rows(thread: ThreadStack, culprit: bool) -> tuple[FrameRow, ...]:
    frames = thread.frames
    _, outer = trimmed_frames(thread)  # the terminal hides these outermost frames
    first_outer = len(frames) - outer
    python_positions = [n for n, f in enumerate(frames) if f.is_python]
    bootstrap_line = python_positions[-1] if python_positions and frames[python_positions[-1]].file == "<string>" \
        else None  # the bootstrap's own `-c` line, outermost; a -c program's frames are "<string>" too
    mark = innermost_meaningful(thread) if culprit else None
    rows = []
    for position, frame in enumerate(frames):
        if frame.is_python:
            hidden = frame.is_harness or position == bootstrap_line
        else:
            hidden = position >= first_outer
        rows.append(FrameRow(frame_text(frame), frame.is_python, hidden, frame is mark))
    return tuple(rows)


def _thread_title(thread: ThreadStack, process: ProcessStacks) -> str:
    text = thread.title()
    if process.signal is not None and process.signal.tid == thread.tid:
        text += f", got {process.signal.name or 'a signal'}"
    return text


def _process_view(result: RunResult, process: ProcessStacks, rank: int, forked: dict[int | None, object],
                  roles: dict[tuple[int, int], str]) -> ProcessView:
    title = f"Process {process.pid}"
    if process.pid in forked:
        title += f" (forked child of {forked[process.pid]})"
    elif process.ppid is not None:
        title += f" (parent {process.ppid})"
    command = " ".join(process.cmdline) or process.exe or ""
    if is_bootstrap(process.cmdline):  # lifeguard's child of the run, not a command anyone typed
        command = f"{series_label(result.scenario, result.variant)} (lifeguard's child of the run)"
    if command:
        title += f": {command}"
    title += f"  [{process.backend_label}]"
    lines = []
    if process.signal is not None:
        lines.append(f"killed by {process.signal}")
    if process.error:
        lines.append(f"capture failed: {process.error}")
    lines.extend(f"note: {note}" for note in process.notes)
    full = culprit_threads(result, process, first=rank == 0)
    threads = []
    for thread in process.threads:
        culprit = thread.tid in full
        inner = innermost_meaningful(thread)
        threads.append(ThreadView(_thread_title(thread, process), roles.get((process.pid, thread.tid), ""),
                                  culprit, _frame_rows(thread, culprit), frame_text(inner) if inner else ""))
    # Culprit threads first: a process of 40 threads shows its one that matters at the top.
    threads.sort(key=lambda t: not t.culprit)
    # Open: the likeliest process, and any other a finding or a signal points into.
    return ProcessView(title, rank == 0 or bool(full), tuple(lines), tuple(threads))


def href(path: str, base: Path | None) -> str:
    """A link to ``path`` that still works when the report folder is moved or uploaded: relative to the
    folder when the file is inside it, else an absolute file URL."""
    absolute = os.path.abspath(path)
    if base is not None:
        relative = os.path.relpath(absolute, os.path.abspath(base))
        if not relative.startswith(os.pardir + os.sep) and relative != os.pardir:
            return quote(relative)
    return "file://" + quote(absolute)


def _files(result: RunResult, base: Path | None) -> list[EvidenceFile]:
    """The run's evidence files: those it names, then whatever else its folder holds (cores, dumps)."""
    named = {os.path.abspath(path): name for name, path in result.evidence.items()}
    found: list[EvidenceFile] = [EvidenceFile(os.path.basename(p) if name in ("findings", "backtraces") else name,
                                              href(p, base)) for p, name in named.items()]
    try:
        extra = sorted(e.path for e in os.scandir(result.run_dir) if e.is_file() and os.path.abspath(e.path)
                       not in named)
    except OSError:  # a run folder that is gone (or never was) lists nothing more
        extra = []
    found.extend(EvidenceFile(os.path.basename(p), href(p, base)) for p in extra)
    return found[:MAX_FILES]


_FILE_LINE = re.compile(r'^\s*File "[^"]*", line \d+,? in ')


def harness_lines(text: str) -> list[tuple[str, bool]]:
    """A faulthandler dump or a traceback, each line with whether it is lifeguard's (bootstrap, runpy, the
    bootstrap's own ``-c`` line, and a traceback's source line under them): hidden behind the page's toggle."""
    lines = text.rstrip().splitlines()
    files = [n for n, line in enumerate(lines) if _FILE_LINE.match(line)]
    marks = [False] * len(lines)
    for position, n in enumerate(files):
        line = lines[n]
        if is_harness_file(line):
            marks[n] = True
        elif '"<string>", line 1' in line:
            # The bootstrap's -c line sits beside bootstrap.py's main(); a -c program's own lines do not.
            beside = [lines[files[p]] for p in (position - 1, position + 1) if 0 <= p < len(files)]
            marks[n] = any("/lifeguard/child/bootstrap.py" in b and b.rstrip().endswith(" main") for b in beside)
        if marks[n] and n + 1 < len(lines) and lines[n + 1].startswith("    ") and not _FILE_LINE.match(lines[n + 1]):
            marks[n + 1] = True
    return list(zip(lines, marks, strict=True))


def run_evidence(result: RunResult, base: Path | None) -> RunEvidence:
    """Everything the page shows of one failed run, in the terminal's order."""
    roles = thread_roles(result)
    forked = forked_parents(result)
    view = RunEvidence(result)
    view.processes = [_process_view(result, p, rank, forked, roles)
                      for rank, p in enumerate(processes_by_relevance(result))]
    view.files = _files(result, base)
    with_python = {str(p.pid) for p in result.backtraces if any(t.python_frames for t in p.threads)}
    view.stderr = harness_lines(result.stderr_tail)
    view.dumps = [(pid, harness_lines(dump)) for pid, dump in result.python_stacks.items() if pid not in with_python]
    return view
