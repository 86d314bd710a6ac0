"""The report folder: results.jsonl streamed as runs finish; report.json, junit.xml and report.html at the end."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import threading
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lifeguard import __version__
from lifeguard.errors import DiskFullError, ReportDirError
from lifeguard.model.result import RunResult, Session
from lifeguard.report.escape import for_json
from lifeguard.report.html import render
from lifeguard.report.junit import junit_xml

SCHEMA_VERSION = 1


class JsonlSink:
    """results.jsonl: one line per finished run, synced at once, so a killed harness loses nothing.

    Each line is written whole or not at all: a write the disk cannot take (ENOSPC) is cut back to the end
    of the last whole line and stops the session (DiskFullError), so every line in the file parses.
    It also notes where each run's line starts (8 bytes a run, by series), so report.json can list every run in
    order from this file at the end (``runs_in_order``) instead of the session holding every run until then.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.size = 0  # the end of the last whole line: where the next one starts
        self.lock = threading.Lock()
        # (scenario, variant) -> run indexes and the offsets of their lines, in the order the runs finished
        self.lines: dict[tuple[str, str], tuple[array[int], array[int]]] = {}

    def start(self, session: Session, total_runs: int | None) -> None:
        pass

    def result(self, result: RunResult) -> None:
        line = (json.dumps(for_json(result.to_dict())) + "\n").encode("utf-8")
        with self.lock:
            if self.fd < 0:
                return
            try:
                written = 0
                while written < len(line):
                    written += os.pwrite(self.fd, line[written:], self.size + written)
                os.fsync(self.fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(self.fd, self.size)  # no half line: the file ends with the last whole one
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFullError(self.path) from None
                raise
            indexes, offsets = self.lines.setdefault((result.scenario, result.variant), (array("q"), array("q")))
            indexes.append(result.index)
            offsets.append(self.size)
            self.size += len(line)

    def finish(self, session: Session) -> None:
        with self.lock:
            if self.fd >= 0:
                # Each line went to its own offset: what another writer appended (a run's program can reach
                # this file) was written over, or lies past the last line and goes now.
                with contextlib.suppress(OSError):
                    os.ftruncate(self.fd, self.size)
                os.close(self.fd)
                self.fd = -1

    def runs_in_order(self) -> Iterator[dict[str, Any]]:
        """Every run written, read back one at a time from the file, by scenario, variant and index."""
        with open(self.path, "rb") as f:
            for key in sorted(self.lines):
                indexes, offsets = self.lines[key]
                for position in sorted(range(len(indexes)), key=indexes.__getitem__):
                    f.seek(offsets[position])
                    yield json.loads(f.readline())


def report_dict(session: Session) -> dict[str, Any]:
    """report.json without its runs (``write_report`` adds them, one at a time)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "lifeguard_version": __version__,
        "python": session.interpreter.to_dict(),
        "base_seed": session.base_seed,
        "started": session.started,
        "duration": round(session.duration, 3),
        "interrupted": session.interrupted,
        "stopped": session.stopped,
        "membership": session.membership,
        "plan": session.plan,
        "shard": session.shard or None,
        "merged_from": list(session.merged),
        "all_expected": session.all_expected,
        "failure": session.failure or None,
        "summaries": [s.to_dict() for s in session.summaries],
        "runs": [],
    }


def write_report(path: Path, session: Session, runs: Iterable[dict[str, Any]]) -> None:
    """report.json, its runs streamed in: the same text ``json.dumps(..., indent=1)`` of the whole report
    would be, without the whole report in memory at once."""
    head = json.dumps(for_json(report_dict(session)), indent=1, default=str)
    empty_runs = "[]\n}"
    assert head.endswith(empty_runs)  # "runs" is the last key
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(head[: -len(empty_runs)])
            separator = "[\n"
            for run in runs:
                out.write(separator + "  " + json.dumps(run, indent=1, default=str).replace("\n", "\n  "))
                separator = ",\n"
            out.write(empty_runs if separator == "[\n" else "\n ]\n}")
        os.replace(tmp, path)
    except OSError as exc:  # whole or not at all, as _atomic_write
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(path) from None
        raise


# What a session writes into its report folder; a reused folder is emptied of these first, so no
# evidence of an earlier session stands beside a new verdict.
REPORT_FILES = ("results.jsonl", "report.json", "junit.xml", "report.html")
RUNS_FOLDER = "runs"
# Held locked for a session, and left in the folder: it marks the folder as lifeguard's (claim_report_folder).
LOCK_FILE = ".lifeguard.lock"


class ReportDirSink:
    """--report DIR: results.jsonl as runs finish; report.json, junit.xml and report.html at the end.

    The folder is locked for the session: a second lifeguard writing into it is refused. A folder that
    cannot be written (a file, read-only, not ours) is refused before any run starts (ReportDirError).
    """

    def __init__(self, directory: Path, fresh: bool = True) -> None:
        """``fresh``: a new session's folder (an earlier one's files go); not where a crashed pytest worker's
        session goes on (lifeguard.pytest_plugin.keeper), whose runs stay."""
        self.directory = directory
        claim_report_folder(directory)
        try:
            self._lock = open(directory / LOCK_FILE, "a")  # noqa: SIM115 (held until finish)
        except OSError as exc:
            raise ReportDirError(_cannot_write(directory, exc)) from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise ReportDirError(f"--report {directory}: another lifeguard is writing this folder; "
                                 "wait for it or choose another folder") from None
        try:
            for name in REPORT_FILES if fresh else ():
                (directory / name).unlink(missing_ok=True)
            if fresh and not (directory / RUNS_FOLDER).is_symlink():  # refused by the claim; never emptied through
                shutil.rmtree(directory / RUNS_FOLDER, ignore_errors=True)
            self.jsonl = JsonlSink(directory / "results.jsonl")
        except OSError as exc:
            self._lock.close()
            raise ReportDirError(_cannot_write(directory, exc)) from None

    def start(self, session: Session, total_runs: int | None) -> None:
        self.jsonl.start(session, total_runs)

    def result(self, result: RunResult) -> None:
        self.jsonl.result(result)

    def finish(self, session: Session) -> None:
        try:
            self.jsonl.finish(session)
            write_report(self.directory / "report.json", session, self.jsonl.runs_in_order())
            _atomic_write(self.directory / "junit.xml", junit_xml(session))
            # The page's table lists every run too, read back once more from results.jsonl.
            try:
                page = render(session, self.jsonl.runs_in_order(), self.directory)
            except ModuleNotFoundError as exc:  # lifeguard's plugin in an environment of its own (survey --tests)
                page = (f"<!doctype html><title>lifeguard report</title><p>report.html needs {exc.name}, which this "
                        "interpreter's environment lacks: report.json, junit.xml and results.jsonl hold the session."
                        "</p>")
            _atomic_write(self.directory / "report.html", page)
        finally:
            self._lock.close()  # releases the flock


def claim_report_folder(directory: Path, option: str = "--report") -> None:
    """Make ``directory`` a report folder of lifeguard's, or refuse it in one line (ReportDirError).

    A session empties what an earlier one left in its folder (its reports, its runs/), so it writes only into a
    folder that is new, empty, or already marked as lifeguard's (LOCK_FILE, which this leaves there): a folder
    holding anything else is the user's, and nothing in it is emptied or replaced. Refused too: an empty path,
    a file, a folder this user cannot write, a runs/ that is a symbolic link (emptied, it would empty what it
    points to)."""
    if not str(directory) or str(directory).isspace():
        raise ReportDirError(f"{option} '{directory}': an empty path; name a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / LOCK_FILE
        if not marker.is_symlink() and not marker.exists():
            others = sorted(entry.name for entry in os.scandir(directory))
            if others:
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                raise ReportDirError(f"{option} {directory}: holds files lifeguard did not write ({shown}); "
                                     "choose a new or empty folder, or one an earlier lifeguard session wrote")
        if (directory / RUNS_FOLDER).is_symlink():
            raise ReportDirError(f"{option} {directory}: its {RUNS_FOLDER}/ is a symbolic link, which a session "
                                 "would empty; remove the link or choose another folder")
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReportDirError(f"{option} {directory}: its {LOCK_FILE} is a symbolic link; remove it or choose "
                                 "another folder") from None
        raise ReportDirError(_cannot_write(directory, exc, option)) from None


def _cannot_write(directory: Path, exc: OSError, option: str = "--report") -> str:
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return f"{option} {directory}: not a folder (it, or a folder on its path, is a file); choose a folder"
    return (f"{option} {directory}: cannot write there ({exc.strerror or exc}); "
            "choose a folder this user can write")


def _atomic_write(path: Path, text: str) -> None:
    """``path`` whole or not at all; a full disk stops with DiskFullError and leaves no partial file.
    The text is escaped for its format already; backslashreplace only keeps a missed character from
    losing the whole file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(path) from None
        raise
