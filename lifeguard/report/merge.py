"""`lifeguard merge`: the report folders of a plan's shards (`lifeguard run --shard K/N --report DIR`) as one
session, judged over every run, written through the same sinks as any session.

A shard's report.json says which plan it is a part of (its fingerprint, plan.scheduler.plan_fingerprint),
which shard, and under which lifeguard, interpreter and base seed it ran; the merge refuses folders that
disagree, and names the shards that are missing. Runs come from each shard's results.jsonl, one at a time;
a failed run's evidence folder is copied under OUT/runs/ and its paths follow it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lifeguard import __version__
from lifeguard.errors import MergeError
from lifeguard.interpreter import Interpreter
from lifeguard.model.result import RunResult, Session
from lifeguard.model.scenario import Scenario
from lifeguard.model.tally import SeriesTally
from lifeguard.model.validate import MAX_COUNT
from lifeguard.model.validate import shard as shard_part
from lifeguard.report.sinks import sinks_for
from lifeguard.run.sink import count_run, series_finished


@dataclass(frozen=True)
class Shard:
    folder: Path
    head: dict[str, Any]  # report.json without its runs
    number: int
    count: int

    @property
    def identity(self) -> tuple[object, ...]:
        python = self.head.get("python") or {}
        return (self.head.get("plan"), self.head.get("lifeguard_version"), python.get("executable"),
                python.get("version"), self.head.get("base_seed"), self.count)

    def runs(self) -> Iterator[RunResult]:
        """Each run of results.jsonl; a line that is not a run (cut, mistyped, appended by another program) is a
        MergeError naming the file and line: a merged verdict must rest on every run of every shard."""
        path = self.folder / "results.jsonl"
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    yield RunResult.from_dict(json.loads(line))
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                    raise MergeError(f"{path}:{number}: not a run lifeguard wrote ({type(exc).__name__}: "
                                     f"{str(exc)[:200]})") from None


MAX_RUNS = MAX_COUNT  # a series' runs in a shard's report.json


def read_shard(folder: Path) -> Shard:
    """A shard's report.json (regular files only: a symbolic link in a shard is not followed), checked."""
    for name in ("report.json", "results.jsonl"):
        if (folder / name).is_symlink():
            raise MergeError(f"{folder}/{name} is a symbolic link: a shard's files are read only from the shard")
    try:
        with open(folder / "report.json", encoding="utf-8") as f:
            head = json.load(f)
    except FileNotFoundError:
        raise MergeError(f"{folder}: no report.json (not the --report folder of a finished lifeguard run)") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise MergeError(f"{folder}/report.json cannot be read: {str(exc)[:200]}") from None
    if not isinstance(head, dict):
        raise MergeError(f"{folder}/report.json is not a report lifeguard wrote (not an object)")
    head.pop("runs", None)
    _check_head(folder, head)
    if not head.get("shard"):
        raise MergeError(f"{folder}: not a shard (its session ran the whole plan: no --shard K/N)")
    try:
        number, count = shard_part(head["shard"], f"{folder}/report.json: shard")
    except ValueError as exc:
        raise MergeError(str(exc)) from None
    if not (folder / "results.jsonl").is_file():
        raise MergeError(f"{folder}: no results.jsonl")
    return Shard(folder, head, number, count)


def _check_head(folder: Path, head: dict[str, Any]) -> None:
    """Every field the merge reads has the type lifeguard writes, else a MergeError naming it."""
    def wrong(field: str, what: str) -> MergeError:
        return MergeError(f"{folder}/report.json: {field} is not {what}")

    for field in ("started", "duration"):
        value = head.get(field) or 0
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e12:
            raise wrong(field, "a number of seconds")
    if not isinstance(head.get("base_seed") or 0, int):
        raise wrong("base_seed", "a whole number")
    if not isinstance(head.get("python") or {}, dict):
        raise wrong("python", "an object")
    summaries = head.get("summaries") or []
    if not isinstance(summaries, list):
        raise wrong("summaries", "a list")
    for summary in summaries:
        if not (isinstance(summary, dict) and all(isinstance(summary.get(key), str)
                                                  for key in ("scenario", "variant", "expected"))):
            raise wrong("a summary", "an object with scenario, variant and expected")
        runs = summary.get("runs") or 0
        if not isinstance(runs, int) or not 0 <= runs <= MAX_RUNS:
            raise wrong(f"the runs of {summary['scenario'][:80]!r}", f"a count up to {MAX_RUNS}")


def check_shards(shards: Sequence[Shard]) -> None:
    """One plan, one of each shard, every shard there; else a MergeError that says what is wrong."""
    first = shards[0]
    names = ("plan", "lifeguard version", "interpreter", "Python version", "base seed", "shard count")
    for shard in shards[1:]:
        for name, mine, theirs in zip(names, first.identity, shard.identity, strict=True):
            if mine != theirs:
                raise MergeError(f"{shard.folder} is not a shard of the plan of {first.folder}: its {name} is "
                                 f"{theirs!r}, not {mine!r}")
    seen: dict[int, Path] = {}
    for shard in shards:
        if shard.number in seen:
            raise MergeError(f"shard {shard.number}/{shard.count} given twice: {seen[shard.number]} and {shard.folder}")
        seen[shard.number] = shard.folder
    missing = [f"{k}/{first.count}" for k in range(1, first.count + 1) if k not in seen]
    if missing:
        raise MergeError(f"shard(s) missing: {', '.join(missing)} (every shard's folder is needed for the verdicts "
                         "over the whole plan)")


def _scenarios(shards: Sequence[Shard]) -> list[Scenario]:
    """The plan's series as scenarios (name, expectation per variant), in the order of the first shard."""
    expect: dict[str, dict[str, str]] = {}
    described: dict[str, dict[str, Any]] = {}
    for shard in shards:
        for summary in shard.head.get("summaries") or []:
            expect.setdefault(summary["scenario"], {})[summary["variant"]] = summary["expected"]
            described.setdefault(summary["scenario"], summary)
    scenarios = []
    for name, by_variant in expect.items():
        summary = described[name]
        path, _, line = str(summary.get("where") or "").rpartition(":")
        scenarios.append(Scenario(name=name, function=name, path=path, line=int(line) if line.isdigit() else 0,
                                  fixture=None, expect=by_variant, timeout=1.0, repeat={"*": 1},
                                  description=summary.get("description") or "", replay=""))
    return scenarios


def _interpreter(head: dict[str, Any]) -> Interpreter:
    python = head.get("python") or {}
    parts = [int(part) for part in str(python.get("version", "")).split(".")[:3] if part.isdigit()] + [0, 0, 0]
    return Interpreter(executable=str(python.get("executable", "")), version=(parts[0], parts[1], parts[2]),
                       include="", ext_suffix="", soabi=str(python.get("soabi", "")), libdir="", ldlibrary="")


def _moved(result: RunResult, shard: Path, runs_dir: Path) -> RunResult:
    """A failed run with its evidence folder copied under the merged report's runs folder; of it only regular
    files and folders (a symbolic link is not followed: what it points to is not the shard's)."""
    source = _run_folder(result.run_dir, shard)
    if source is None:
        return result
    target = runs_dir / source.name  # unique: the shards' run indices never overlap
    shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True, ignore=_links)
    evidence = {name: path.replace(result.run_dir, str(target), 1) for name, path in result.evidence.items()}
    return replace(result, run_dir=str(target), evidence=evidence)


def _run_folder(run_dir: str, shard: Path) -> Path | None:
    """A run's folder inside its shard's, where the run left it or, for a shard moved since (a CI artifact
    downloaded elsewhere), at the same place under the shard's runs/; None for any other path (a results.jsonl
    may name any), one through a symbolic link or "..", or one that is not there."""
    named = Path(run_dir)
    if not named.is_absolute() or ".." in named.parts:
        return None
    if not named.is_relative_to(shard):
        above = [index for index, part in enumerate(named.parts[:-1]) if part == "runs"]
        if not above:
            return None
        named = shard.joinpath(*named.parts[above[-1]:])
    if not named.is_dir() or named.resolve() != named:
        return None  # gone, or reached through a symbolic link
    return named


def _links(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if os.path.islink(os.path.join(folder, name))]


def merge_shards(folders: Sequence[Path], out: Path, *, color: str = "auto") -> Session:
    shards = sorted((read_shard(folder.resolve()) for folder in folders), key=lambda s: s.number)
    if out.resolve() in {shard.folder for shard in shards}:
        raise MergeError(f"--report {out} is one of the shards' folders: merge into another folder")
    check_shards(shards)
    first = shards[0].head
    if first.get("lifeguard_version") != __version__:
        raise MergeError(f"the shards ran lifeguard {first.get('lifeguard_version')}; this is {__version__}")
    session = Session(_interpreter(first), _scenarios(shards))
    session.base_seed = int(first.get("base_seed") or 0)
    session.plan = str(first.get("plan") or "")
    session.membership = str(first.get("membership") or "")
    session.merged = tuple(str(shard.folder) for shard in shards)
    session.started = min(float(shard.head.get("started") or 0) for shard in shards)
    session.interrupted = any(shard.head.get("interrupted") for shard in shards)
    session.failure = "; ".join(str(s.head["failure"]) for s in shards if s.head.get("failure"))
    version = session.interpreter.short_version
    tallies = {(item.name, variant): SeriesTally(item, variant, item.expectation(variant, version))
               for item in session.scenarios for variant in item.variants}
    sinks = sinks_for(terminal=True, report_dir=out, color=color)
    runs_dir = out.resolve() / "runs"
    for sink in sinks:
        sink.start(session, sum(int(s.get("runs") or 0) for shard in shards for s in shard.head.get("summaries", [])))
    for shard in shards:
        for result in shard.runs():
            tally = tallies.get((result.scenario, result.variant))
            if tally is None:
                raise MergeError(f"{shard.folder}: run {result} is of no series of the plan")
            if tally.is_evidence(result):
                result = _moved(result, shard.folder, runs_dir)
            count_run(session, tally, result, sinks)
    session.duration = max(float(shard.head.get("duration") or 0) for shard in shards)  # the shards ran side by side
    session.summaries = [tally.summary() for tally in tallies.values()]
    for summary in session.summaries:
        series_finished(summary, sinks)
    for sink in sinks:
        sink.finish(session)
    return session
