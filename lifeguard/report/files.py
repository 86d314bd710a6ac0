"""The report folder: results.jsonl streamed as runs finish; report.json, junit.xml and report.html at the end."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from lifeguard import __version__
from lifeguard.errors import ConfigurationError
from lifeguard.model.result import RunResult, Session
from lifeguard.report.html import render
from lifeguard.report.junit import junit_xml

SCHEMA_VERSION = 1



class JsonlSink:
    """results.jsonl: one line per finished run, flushed at once, so a killed harness loses nothing."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in finish)
        self.lock = threading.Lock()

    def start(self, session: Session, total_runs: int | None) -> None:
        pass

    def result(self, result: RunResult) -> None:
        line = json.dumps(result.to_dict(), default=str)
        with self.lock:
            self.file.write(line + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())

    def finish(self, session: Session) -> None:
        self.file.close()



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
        "membership": session.membership,
        "all_expected": session.all_expected,
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

    The folder is locked for the session: a second lifeguard writing into it is refused.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = open(directory / LOCK_FILE, "a")  # noqa: SIM115 (held until finish)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise ConfigurationError(f"--report {directory}: another lifeguard is writing this folder; "
                                     "wait for it or choose another folder") from None
        for name in REPORT_FILES:
            (directory / name).unlink(missing_ok=True)
        shutil.rmtree(directory / RUNS_FOLDER, ignore_errors=True)
        self.jsonl = JsonlSink(directory / "results.jsonl")

    def start(self, session: Session, total_runs: int | None) -> None:
        self.jsonl.start(session, total_runs)

    def result(self, result: RunResult) -> None:
        self.jsonl.result(result)

    def finish(self, session: Session) -> None:
        self.jsonl.finish(session)
        _atomic_write(self.directory / "report.json", json.dumps(report_dict(session), indent=1, default=str))
        _atomic_write(self.directory / "junit.xml", junit_xml(session))
        _atomic_write(self.directory / "report.html", render(session))
        self._lock.close()  # releases the flock



def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
