"""The log a process that runs pytest's tests writes for the process that waits on it: the keeper's worker
(lifeguard.pytest_plugin.keeper) and a group's child (lifeguard.pytest_plugin.groups). A line of JSON an entry:
a test's start, each report pytest made of it (its own serialized form), what it logged itself and the warnings
it raised, its end. Read back as a WorkerLog, written at once line by line to an unnamed file both hold.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

TestPhase = Literal["setup", "call", "teardown"]
PHASES: tuple[TestPhase, ...] = ("setup", "call", "teardown")
WORKER_LINE_LIMIT = 16 * 1024 * 1024  # a serialized report larger than this is not kept for a replay


@dataclass
class WorkerLog:
    """What a dead worker wrote: the tests it finished (their reports) and the one it was in."""

    finished: list[list[dict[str, Any]]] = field(default_factory=list)
    current: str | None = None  # node id of the test in progress
    location: tuple[str, int | None, str] | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)  # the test in progress's reports so far

    finished_ids: list[str] = field(default_factory=list)
    warnings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # a group child's, by test
    failed_subtests: dict[str, int] = field(default_factory=dict)  # a group child's count of them, by test
    probing: str | None = None  # the test-suite probe the test in progress was in (suite_probes)
    probed: dict[str, dict[str, Any]] = field(default_factory=dict)  # what each test's probe did, or why not

    def warnings_of(self, nodeid: str) -> list[dict[str, Any]]:
        return self.warnings.get(nodeid, [])

    @property
    def died_in(self) -> TestPhase:
        """The phase of the test in progress that had no report yet: the one a worker died in."""
        made = {data.get("when") for data in self.reports}
        return next((phase for phase in PHASES if phase not in made), "teardown")

    @property
    def begun(self) -> list[str]:
        """The tests this worker began: those it finished and the one it died in."""
        return self.finished_ids + ([self.current] if self.current else [])

    @classmethod
    def read(cls, fd: int) -> WorkerLog:
        log = cls()
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by the crash
            if not isinstance(entry, dict):
                continue
            if entry.get("start"):
                log.current, log.reports, log.probing = str(entry["start"]), [], None
                where = entry.get("location")
                log.location = (str(where[0]), where[1], str(where[2])) if isinstance(where, list) else None
            elif entry.get("finish") and log.current is not None:
                log.finished.append(log.reports)
                log.finished_ids.append(log.current)
                log.current, log.reports = None, []
            elif isinstance(entry.get("report"), dict):
                log.reports.append(entry["report"])
                if entry.get("failed_subtests") and log.current is not None:
                    log.failed_subtests[log.current] = int(entry["failed_subtests"])
            elif entry.get("probing") and entry["probing"] == log.current:
                log.probing = str(entry.get("probe"))
            elif entry.get("probed"):
                log.probed[str(entry["probed"])] = entry
                if entry["probed"] == log.current:
                    log.probing = None
            elif isinstance(entry.get("warning"), dict) and log.current is not None:
                log.warnings.setdefault(log.current, []).append(entry["warning"])
        return log


def log_line(fd: int, entry: dict[str, Any]) -> None:
    """One entry of a worker's (or a group child's, lifeguard.pytest_plugin.groups) log: a line of JSON, written
    at once; one larger than WORKER_LINE_LIMIT is not kept."""
    line = json.dumps(entry, default=str).encode() + b"\n"
    if len(line) <= WORKER_LINE_LIMIT:
        os.write(fd, line)


def report_from_log(config: pytest.Config, data: dict[str, Any]) -> Any:
    """A report a log line holds, as pytest made it: JSON has no tuples, and a skip's ``longrepr`` is one
    (path, line, reason); a subtest's parameters are the text its child showed (pytest 9.1+ makes them text with
    saferepr, and again when it reads them back: ``i='3'`` where plain pytest says ``i=3``)."""
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    if report is not None and isinstance(getattr(report, "longrepr", None), list):
        report.longrepr = tuple(report.longrepr)
    context, shipped = getattr(report, "context", None), data.get("_subtest.context")
    if isinstance(shipped, dict) and isinstance(shipped.get("kwargs"), dict) and context is not None:
        with contextlib.suppress(AttributeError, TypeError):
            object.__setattr__(context, "kwargs", dict(shipped["kwargs"]))  # a frozen dataclass of pytest's
    return report
