"""One lifeguard session for a whole pytest session: every guarded test's runs, one report folder.

Each guarded or marked test adds its scenario and its runs here as it ends; under ``--lifeguard-report DIR``
they stream into DIR/results.jsonl at once and DIR/report.json, junit.xml, report.html and index.txt are
written when pytest's session finishes. A test's failed runs keep their evidence under
DIR/runs/<test path>/, a folder named after the test id (``tests/test_io.py/TestFile/test_read[big]``), so
a reader finds a test's evidence without the report.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

from lifeguard.child.forked_test import harness_imports
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session, counts_text, series_label
from lifeguard.model.scenario import Scenario
from lifeguard.model.seeds import text_digest
from lifeguard.model.tally import SeriesTally
from lifeguard.report.sinks import sinks_for
from lifeguard.run.sink import Sink, count_run
from lifeguard.run.spares import RunFolders

INDEX_FILE = "index.txt"
RUNS_FOLDER = "runs"
WORKERS_FOLDER = "workers"  # under pytest-xdist: DIR/workers/<worker id>/, merged into DIR by the controller
PART_LIMIT = 80  # characters of one part of a test id kept in its folder's name
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]]")


def test_folder(nodeid: str) -> Path:
    """``tests/test_io.py::TestFile::test_read[big]`` -> tests/test_io.py/TestFile/test_read[big]: the test
    id's parts as folders; an odd character becomes ``_``, and a part cut short or changed gets a short hash,
    so two tests never share a folder."""
    path, _, rest = nodeid.partition("::")
    parts = [p for p in path.split("/") if p not in ("", ".", "..")] + [p for p in rest.split("::") if p]
    named = []
    for part in parts:
        safe = _UNSAFE.sub("_", part)[:PART_LIMIT]
        if safe != part:
            safe += "-" + text_digest(part, 8)
        named.append(safe)
    return Path(*named) if named else Path("_")


class SessionRecord:
    """The pytest session's lifeguard session: its scenarios (one a test), their tallies, the report sinks."""

    def __init__(self, interpreter: Interpreter, report_dir: Path | None, runs_root: Path,
                 fresh: bool = True) -> None:
        """``runs_root``: where failed runs keep their evidence without a report folder (pytest's own
        temporary tree, which pytest rotates); ``fresh``: false where a crashed worker's session goes on."""
        self.fresh = fresh
        self.session = Session(interpreter, [])
        self.shard: tuple[int, int] | None = None  # --lifeguard-shard
        self.report_dir = report_dir
        self.runs_root = runs_root if report_dir is None else report_dir / RUNS_FOLDER
        self._sinks: list[Sink] | None = None
        self._tallies: dict[tuple[str, str], SeriesTally] = {}
        self._index: list[str] = []
        self._began = time.monotonic()
        self._folders = RunFolders()  # passed runs' folders, recycled while later tests' children start

    def discard(self, run_dir: Path) -> None:
        """A passed run's folder, no longer needed (RunFolders.discard)."""
        self._folders.discard(run_dir)

    def spare(self, run_dir: Path) -> Path | None:
        """A folder emptied while an earlier test's child ran, that can become ``run_dir`` (RunFolders.spare)."""
        return self._folders.spare(run_dir)

    def meanwhile(self, run_dir: Path, next_test: str | None) -> None:
        """While a forked test's child runs (``run_dir`` its folder): the discarded folders are emptied into
        spares or removed (RunFolders.tidy), and the folder of the test pytest runs next (``next_test``, a node
        id) is made, so that test's run folder is a rename away (RunFiles.create), with no folder made, file
        truncated or removed on its own time."""
        self._folders.tidy(run_dir)
        if next_test is not None:
            try:
                self.folder_of(next_test).mkdir(parents=True, exist_ok=True)
            except OSError:
                pass  # made when that test starts, or said then why not

    def remove_discarded(self, keep: Path | None = None) -> None:
        """Remove the discarded and spare folders but ``keep`` (the folder of the run starting now: a test run
        again in this session, by a plugin that reruns failures, uses the same one)."""
        self._folders.remove_all(keep)

    @property
    def shard_text(self) -> str:
        return f"{self.shard[0]}/{self.shard[1]}" if self.shard else ""

    def as_shard(self, part: tuple[int, int] | None, plan: str) -> None:
        """This session is shard ``part`` of the plan ``plan`` (a fingerprint of the collected tests)."""
        self.shard = part
        self.session.shard = self.shard_text
        self.session.plan = plan

    def folder_of(self, nodeid: str) -> Path:
        """Where a test's runs keep their evidence."""
        return self.runs_root / test_folder(nodeid)

    def open(self) -> list[Sink]:
        """Before a test's first run (a report folder is emptied of an earlier session's files when opened)."""
        if self._sinks is None:  # on the first test: a session without guarded tests writes nothing
            with harness_imports():  # the report writers' modules: not finalized in every forked test
                self._sinks = sinks_for(terminal=False, report_dir=self.report_dir, fresh=self.fresh)
                self.session.runs_dir = self.runs_root
                for sink in self._sinks:
                    sink.start(self.session, None)
        return self._sinks

    def add(self, scenario: Scenario, results: list[RunResult]) -> list[SeriesSummary]:
        """A test's scenario and its finished runs (every one, passed or not); its series' summaries."""
        sinks = self.open()
        session = self.session
        session.scenarios.append(scenario)
        version = session.interpreter.short_version
        ran = {r.variant for r in results}
        variants = [v for v in scenario.variants if v in ran or self.shard is None]  # a shard: its series only
        for variant in variants:
            key = (scenario.name, variant)
            self._tallies[key] = SeriesTally(scenario, variant, scenario.expectation(variant, version))
        for result in results:
            count_run(session, self._tallies[(result.scenario, result.variant)], result, sinks)
        summaries = [self._tallies[(scenario.name, variant)].summary() for variant in variants]
        for summary in summaries:
            variant = summary.variant
            mark = "ok  " if summary.verdict is Verdict.EXPECTED else "FAIL"
            counts = counts_text(summary.counts)
            where = ""
            failed = [r for r in results if r.outcome is not Outcome.PASSED]
            if self.report_dir is not None and failed:
                kept = Path(failed[0].run_dir).parent  # a worker's runs stay in its own folder
                where = f"  {kept.relative_to(self.report_dir) if kept.is_relative_to(self.report_dir) else kept}"
            self._index.append(f"{mark} {series_label(scenario.name, variant)}  {counts}  (expected {summary.expected})"
                               f"{where}")
        return summaries

    def add_call(self, prefix: str, session: Session) -> None:
        """A ``lifeguard`` fixture call's engine session: its scenarios named after the test and the call
        (``tests/test_x.py::test_y::01-code::code``), so calls of different tests never share a series."""
        renamed = {item.name: replace(item, name=f"{prefix}::{item.name}") for item in session.scenarios}
        for original, scenario in renamed.items():
            self.add(scenario, [replace(r, scenario=scenario.name) for r in session.results if r.scenario == original])

    def merge_workers(self, workers: Path) -> int:
        """The controller of a pytest-xdist session: every worker's runs (DIR/workers/*/results.jsonl, each
        run's evidence staying in its worker's folder) become this one session; returns the workers read."""
        from lifeguard.model.scenario import DEFAULT_TIMEOUT

        by_test: dict[str, list[RunResult]] = {}
        folders = sorted(f for f in workers.iterdir() if (f / "results.jsonl").is_file()) if workers.is_dir() else []
        for folder in folders:
            if not self.session.plan:  # the controller collects nothing: its workers' plan (they all agree)
                try:
                    self.session.plan = str(json.loads((folder / "report.json").read_text()).get("plan") or "")
                except (OSError, ValueError):
                    pass
            with open(folder / "results.jsonl", encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        result = RunResult.from_dict(json.loads(line))
                        by_test.setdefault(result.scenario, []).append(result)
        for name, results in by_test.items():
            expect = {r.variant: r.expected for r in results}
            where = Path(results[0].run_dir)
            scenario = Scenario(name=name, function=name.rpartition("::")[2], path=str(where), line=0, fixture=None,
                                expect=expect, timeout=DEFAULT_TIMEOUT, repeat={"*": 1}, description=name, replay="")
            self.add(scenario, results)
        return len(folders)

    def finish(self, *, interrupted: bool) -> None:
        """pytest's session is over: the summaries, and every sink's last files."""
        self.remove_discarded()
        if self._sinks is None:
            return
        session = self.session
        session.interrupted = interrupted
        session.duration = time.monotonic() - self._began
        session.summaries = [tally.summary() for tally in self._tallies.values()]
        for sink in self._sinks:
            sink.finish(session)
        if self.report_dir is not None:
            (self.report_dir / INDEX_FILE).write_text(
                "".join(line + "\n" for line in self._index), encoding="utf-8", errors="backslashreplace")
