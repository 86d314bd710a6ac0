"""The report folder: results.jsonl streamed as runs finish; report.json, junit.xml and report.html at the end."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
import threading
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
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.size = 0  # the end of the last whole line
        self.lock = threading.Lock()

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
            self.size += len(line)

    def finish(self, session: Session) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


def report_dict(session: Session) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "lifeguard_version": __version__,
        "python": session.interpreter.to_dict(),
        "base_seed": session.base_seed,
        "started": session.started,
        "duration": round(session.duration, 3),
        "interrupted": session.interrupted,
        "stopped": session.stopped,
        "all_expected": session.all_expected,
        "failure": session.failure or None,
        "summaries": [s.to_dict() for s in session.summaries],
        "runs": [r.to_dict() for r in sorted(session.results, key=lambda r: (r.scenario, r.variant, r.index))],
    }



# What a session writes into its report folder; a reused folder is emptied of these first, so no
# evidence of an earlier session stands beside a new verdict.
REPORT_FILES = ("results.jsonl", "report.json", "junit.xml", "report.html")
RUNS_FOLDER = "runs"
LOCK_FILE = ".lifeguard.lock"


class ReportDirSink:
    """--report DIR: results.jsonl as runs finish; report.json, junit.xml and report.html at the end.

    The folder is locked for the session: a second lifeguard writing into it is refused. A folder that
    cannot be written (a file, read-only, not ours) is refused before any run starts (ReportDirError).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        writable_folder(directory)
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
            for name in REPORT_FILES:
                (directory / name).unlink(missing_ok=True)
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
            _atomic_write(self.directory / "report.json", json.dumps(for_json(report_dict(session)), indent=1))
            _atomic_write(self.directory / "junit.xml", junit_xml(session))
            _atomic_write(self.directory / "report.html", render(session))
        finally:
            self._lock.close()  # releases the flock


def writable_folder(directory: Path) -> None:
    """Make ``directory`` (a report folder) or refuse it in one line: a file, a read-only or foreign one."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".lifeguard-write-test-")  # noqa: SIM115
        probe.close()  # removes it
    except OSError as exc:
        raise ReportDirError(_cannot_write(directory, exc)) from None


def _cannot_write(directory: Path, exc: OSError) -> str:
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return f"--report {directory}: not a folder (it, or a folder on its path, is a file); choose a folder"
    return (f"--report {directory}: cannot write there ({exc.strerror or exc}); "
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
