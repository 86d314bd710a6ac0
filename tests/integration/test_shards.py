"""`lifeguard run --shard K/N` and `lifeguard merge`: three shards of a real plan (passing runs, crashes at exit
in real children) merged into the one session the unsharded plan gives, and merges that must be refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import CLI_TIMEOUT, load_report, real_python, run_cli

PLAN = """
import os
import signal

import lifeguard


@lifeguard.scenario(expect={"default": "passed"}, repeat=7)
def quiet():
    pass


@lifeguard.scenario(expect={"default": "crashed@exit"}, repeat=5)
def crash_at_exit():
    import atexit
    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)


@lifeguard.scenario(expect={"default": "passed"}, repeat=1)
def single():
    pass
"""
SEED = "12345"


def _runs(report: dict) -> set[tuple[str, str, int, int, str]]:
    return {(r["scenario"], r["variant"], r["index"], r["seed"], r["outcome"]) for r in report["runs"]}


def _verdicts(report: dict) -> dict[str, tuple[str, int]]:
    return {s["scenario"]: (s["verdict"], s["runs"]) for s in report["summaries"]}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Path]:
    """The plan's file, its three shards' report folders, and the unsharded plan's."""
    folder = tmp_path_factory.mktemp("shards")
    plan = folder / "plan.py"
    plan.write_text(PLAN)
    reports = []
    for number in (1, 2, 3):
        report = folder / f"shard-{number}"
        proc = run_cli("run", str(plan), "--shard", f"{number}/3", "--base-seed", SEED, "--no-native", "-q",
                       "--report", str(report))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports.append(report)
    whole = folder / "whole"
    proc = run_cli("run", str(plan), "--base-seed", SEED, "--no-native", "-q", "--report", str(whole))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return plan, reports, whole


def test_three_shards_merged_are_the_whole_plan(shards: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    _, reports, whole = shards
    parts = [load_report(report) for report in reports]
    counts = [len(part["runs"]) for part in parts]
    assert sum(counts) == 13 and max(counts) - min(counts) <= 1  # every run once, the shards about even
    assert not set.intersection(*(_runs(part) for part in parts))  # no run in two shards
    merged_dir = tmp_path / "merged"
    proc = run_cli("merge", *map(str, reports), "--report", str(merged_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged, alone = load_report(merged_dir), load_report(whole)
    assert _runs(merged) == _runs(alone)  # the same runs, with the same seeds and outcomes
    assert _verdicts(merged) == _verdicts(alone) == {"quiet": ("expected", 7), "crash_at_exit": ("expected", 5),
                                                     "single": ("expected", 1)}
    assert merged["merged_from"] == [str(report.resolve()) for report in reports]
    assert merged["plan"] == alone["plan"] and merged["shard"] is None
    for run in merged["runs"]:  # every failed run's evidence, copied beside the merged report
        if run["outcome"] == "crashed":
            assert Path(run["run_dir"]).parent == merged_dir.resolve() / "runs"
            assert (Path(run["run_dir"]) / "stderr.txt").exists()
    assert len((merged_dir / "results.jsonl").read_text().splitlines()) == 13
    assert (merged_dir / "junit.xml").exists() and (merged_dir / "report.html").exists()
    assert "13 runs" in proc.stdout and "all as expected" in proc.stdout


def test_a_missing_shard_is_named_and_refused(shards: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    _, reports, _ = shards
    proc = run_cli("merge", str(reports[0]), str(reports[2]), "--report", str(tmp_path / "merged"))
    assert proc.returncode == 2
    assert "shard(s) missing: 2/3" in proc.stderr


def test_folders_of_another_plan_are_refused(shards: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    plan, reports, whole = shards
    other = tmp_path / "other"
    proc = run_cli("run", str(plan), "--repeat", "2", "--shard", "2/3", "--base-seed", SEED, "--no-native", "-q",
                   "--report", str(other))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    refused = run_cli("merge", str(reports[0]), str(other), str(reports[2]), "--report", str(tmp_path / "merged"))
    assert refused.returncode == 2 and "is not a shard of the plan of" in refused.stderr
    assert "its plan is" in refused.stderr
    not_a_shard = run_cli("merge", str(whole), "--report", str(tmp_path / "merged2"))
    assert not_a_shard.returncode == 2 and "not a shard" in not_a_shard.stderr


def _moved_shards(reports: list[Path], into: Path) -> list[Path]:
    """The shards copied elsewhere, as CI artifacts downloaded to another machine are."""
    import shutil

    return [Path(shutil.copytree(report, into / report.name, symlinks=True)) for report in reports]


def _crashed_lines(shard: Path) -> list[tuple[int, dict]]:
    import json

    lines = [json.loads(line) for line in (shard / "results.jsonl").read_text().splitlines()]
    return [(number, run) for number, run in enumerate(lines) if run["outcome"] == "crashed"]


def _rewrite(shard: Path, number: int, run: dict) -> None:
    import json

    lines = (shard / "results.jsonl").read_text().splitlines()
    lines[number] = json.dumps(run)
    (shard / "results.jsonl").write_text("\n".join(lines) + "\n")


def test_a_merge_copies_only_the_shards_own_run_folders(shards: tuple[Path, list[Path], Path],
                                                         tmp_path: Path) -> None:
    """A moved shard's evidence is found under its runs/; a run folder a results.jsonl points elsewhere is not
    copied, nor is what a symbolic link in a run folder points to."""
    _, reports, _ = shards
    moved = _moved_shards(reports, tmp_path / "artifacts")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("the secret")
    with_crash = [shard for shard in moved if _crashed_lines(shard)]
    assert len(with_crash) >= 2
    number, run = _crashed_lines(with_crash[0])[0]
    _rewrite(with_crash[0], number, {**run, "run_dir": str(secret)})  # a folder outside every shard
    number, run = _crashed_lines(with_crash[1])[0]
    original = next(report for report in reports if report.name == with_crash[1].name)
    linked = with_crash[1] / Path(run["run_dir"]).relative_to(original.resolve())
    assert linked.is_dir()
    (linked / "leak.txt").symlink_to(secret / "key.txt")
    merged_dir = tmp_path / "merged"
    proc = run_cli("merge", *map(str, moved), "--report", str(merged_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    copied = [path for path in (merged_dir / "runs").rglob("*")]
    assert copied and not any(path.name in ("key.txt", "leak.txt") for path in copied), copied
    assert "the secret" not in "".join(p.read_text(errors="replace") for p in copied if p.is_file())
    crashed = [r for r in load_report(merged_dir)["runs"] if r["outcome"] == "crashed"]
    found = [r for r in crashed if Path(r["run_dir"]).parent == merged_dir.resolve() / "runs"]
    assert len(found) == len(crashed) - 1  # all but the one pointed outside, found in their moved shards
    assert all((Path(r["run_dir"]) / "stderr.txt").exists() for r in found)


@pytest.mark.parametrize("line", ['{"scenario": "quiet", "variant"', '{"scenario": 5}', "[" * 100_000 + "]" * 100_000,
                                  '"a run"'], ids=["cut", "mistyped", "nested", "not-an-object"])
def test_a_shard_line_that_is_not_a_run_is_named(shards: tuple[Path, list[Path], Path], tmp_path: Path,
                                                 line: str) -> None:
    _, reports, _ = shards
    moved = _moved_shards(reports, tmp_path / "artifacts")
    with open(moved[1] / "results.jsonl", "a") as results:
        results.write(line + "\n")
    count = len((moved[1] / "results.jsonl").read_text().splitlines())
    proc = run_cli("merge", *map(str, moved), "--report", str(tmp_path / "merged"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"results.jsonl:{count}: not a run lifeguard wrote" in proc.stderr


@pytest.mark.parametrize(("field", "value", "said"), [
    ("shard", "1/99999999999", "shard: '1/99999999999': N must be at most 10,000"),
    ("started", "soon", "started is not a number"),
    ("summaries", {"a": 1}, "summaries is not a list"), ("summaries", [{"scenario": 1}], "a summary is not"),
])
def test_a_shard_head_of_the_wrong_shape_is_named(shards: tuple[Path, list[Path], Path], tmp_path: Path,
                                                  field: str, value: object, said: str) -> None:
    import json

    _, reports, _ = shards
    moved = _moved_shards(reports, tmp_path / "artifacts")
    head = json.loads((moved[0] / "report.json").read_text())
    head[field] = value
    (moved[0] / "report.json").write_text(json.dumps(head))
    proc = run_cli("merge", *map(str, moved), "--report", str(tmp_path / "merged"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and said in proc.stderr, proc.stderr


CAMPAIGN = """
import os
import signal


def test_passes():
    pass


def test_crashes_at_exit():
    import atexit
    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)
"""


def test_pytest_shards_of_a_repeat_campaign_merge_into_its_whole(tmp_path: Path) -> None:
    """`pytest --lifeguard --lifeguard-repeat 5 --lifeguard-shard K/2` in two sessions, then `lifeguard merge`:
    every test's five runs, once each, judged together."""
    (tmp_path / "test_campaign.py").write_text(CAMPAIGN)
    reports = []
    for number in (1, 2):
        report = tmp_path / f"shard-{number}"
        proc = subprocess.run([real_python(), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--lifeguard",
                               "--lifeguard-repeat", "5", f"--lifeguard-shard={number}/2",
                               f"--lifeguard-report={report}", "test_campaign.py"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)
        assert (report / "report.json").exists(), proc.stdout + proc.stderr
        assert load_report(report)["shard"] == f"{number}/2", proc.stdout + proc.stderr
        reports.append(report)
    indices = [{(r["scenario"], r["index"]) for r in load_report(report)["runs"]} for report in reports]
    assert not indices[0] & indices[1]
    merged_dir = tmp_path / "merged"
    proc = run_cli("merge", *map(str, reports), "--report", str(merged_dir))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the crash at exit is unexpected
    merged = load_report(merged_dir)
    counts = {s["scenario"].rpartition("::")[2]: (s["runs"], s["counts"]) for s in merged["summaries"]}
    assert counts == {"test_passes": (5, {"passed": 5}), "test_crashes_at_exit": (5, {"crashed": 5})}
