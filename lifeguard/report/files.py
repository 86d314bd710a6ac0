"""The report folder: results.jsonl streamed as runs finish; report.json, junit.xml and report.html at the end."""

from __future__ import annotations

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
from lifeguard.errors import ConfigurationError
from lifeguard.model.result import RunResult, Session
from lifeguard.report.html import render
from lifeguard.report.junit import junit_xml

SCHEMA_VERSION = 1


class JsonlSink:
    """results.jsonl: one line per finished run, flushed at once, so a killed harness loses nothing.

    It also notes where each run's line starts (8 bytes a run, by series), so report.json can list every run in
    order from this file at the end (``runs_in_order``) instead of the session holding every run until then.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = open(path, "wb")  # noqa: SIM115 (closed in finish)
        self.lock = threading.Lock()
        self.written = 0  # bytes so far: where the next line starts
        # (scenario, variant) -> run indexes and the offsets of their lines, in the order the runs finished
        self.lines: dict[tuple[str, str], tuple[array[int], array[int]]] = {}

    def start(self, session: Session, total_runs: int | None) -> None:
        pass

    def result(self, result: RunResult) -> None:
        line = (json.dumps(result.to_dict(), default=str) + "\n").encode()
        with self.lock:
            self.file.write(line)
            self.file.flush()
            os.fsync(self.file.fileno())
            indexes, offsets = self.lines.setdefault((result.scenario, result.variant), (array("q"), array("q")))
            indexes.append(result.index)
            offsets.append(self.written)
            self.written += len(line)

    def finish(self, session: Session) -> None:
        self.file.close()

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
        "all_expected": session.all_expected,
        "summaries": [s.to_dict() for s in session.summaries],
        "runs": [],
    }


def write_report(path: Path, session: Session, runs: Iterable[dict[str, Any]]) -> None:
    """report.json, its runs streamed in: the same text ``json.dumps(..., indent=1)`` of the whole report
    would be, without the whole report in memory at once."""
    head = json.dumps(report_dict(session), indent=1, default=str)
    empty_runs = "[]\n}"
    assert head.endswith(empty_runs)  # "runs" is the last key
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(head[: -len(empty_runs)])
        separator = "[\n"
        for run in runs:
            out.write(separator + "  " + json.dumps(run, indent=1, default=str).replace("\n", "\n  "))
            separator = ",\n"
        out.write(empty_runs if separator == "[\n" else "\n ]\n}")
    os.replace(tmp, path)


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
        write_report(self.directory / "report.json", session, self.jsonl.runs_in_order())
        _atomic_write(self.directory / "junit.xml", junit_xml(session))
        _atomic_write(self.directory / "report.html", render(session))
        self._lock.close()  # releases the flock



def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
