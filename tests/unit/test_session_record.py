"""The pytest plugin's session record: passed runs' folders are removed later, while the next forked test's
child starts, and never the folder of the run starting then; or one becomes the next run's folder, emptied."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lifeguard.interpreter import resolve
from lifeguard.pytest_plugin.session_report import SessionRecord
from lifeguard.run import launch
from lifeguard.run.launch import RunFiles


def _run_folder(root: Path, name: str) -> Path:
    folder = root / name / "run-1"
    folder.mkdir(parents=True)
    (folder / "stdout.txt").write_text("kept until removed")
    return folder


def test_discarded_folders_go_when_asked_but_the_one_starting_now(tmp_path: Path) -> None:
    record = SessionRecord(resolve(None), None, tmp_path)
    first, again = _run_folder(tmp_path, "test_a"), _run_folder(tmp_path, "test_b")
    record.discard(first)
    record.discard(again)
    assert first.exists() and again.exists()  # nothing removed on the test's own time
    record.remove_discarded(keep=again)  # test_b runs again in this session (a plugin rerunning failures)
    assert not first.exists()
    assert again.exists()
    record.remove_discarded()
    assert again.exists()  # it was handed back with the run that reuses it, not discarded again


def test_the_session_s_end_removes_what_is_left(tmp_path: Path) -> None:
    record = SessionRecord(resolve(None), None, tmp_path)
    last = _run_folder(tmp_path, "test_last")
    record.discard(last)
    record.finish(interrupted=False)
    assert not last.exists()


def test_a_spare_folder_is_handed_out_once_emptied_and_only_once(tmp_path: Path) -> None:
    record = SessionRecord(resolve(None), None, tmp_path)
    first = _run_folder(tmp_path, "test_a")
    record.discard(first)
    second = tmp_path / "test_b" / "run-1"
    assert record.spare(second) is None  # as its run left it: not emptied yet
    record.meanwhile(second, None)
    assert record.spare(second) == first
    assert record.spare(second) is None
    record.remove_discarded()
    assert first.exists()  # handed out: the next run's now, never removed as discarded


def test_a_run_folder_made_of_a_spare_is_emptied_as_a_new_one(tmp_path: Path) -> None:
    old = _run_folder(tmp_path, "test_a")
    (old / "events.txt").write_text("{'event': 'started'}\n")
    (old / "faulthandler-123.txt").write_text("a dump")
    (old / "cores").mkdir()
    run_dir = tmp_path / "deeper" / "test_b" / "run-1"
    files, events_fd = RunFiles.create(run_dir, reuse=old)
    os.close(events_fd)
    assert not old.exists()
    # The dump file stays, emptied, for the next run's process to take instead of making a new one.
    assert sorted(path.name for path in run_dir.iterdir()) == ["dump-spare.txt", "events.txt", "stdout.txt"]
    assert files.events.read_text() == "" and files.stdout.read_text() == ""
    assert (run_dir / "dump-spare.txt").read_text() == ""


def test_a_spare_that_is_gone_gives_a_new_folder(tmp_path: Path) -> None:
    run_dir = tmp_path / "test_b" / "run-1"
    files, events_fd = RunFiles.create(run_dir, reuse=tmp_path / "removed meanwhile")
    os.close(events_fd)
    assert run_dir.is_dir() and files.events.read_text() == ""


def test_a_discarded_folder_is_emptied_while_the_next_child_runs_and_then_handed_out_first(tmp_path: Path) -> None:
    record = SessionRecord(resolve(None), None, tmp_path)
    first, second = _run_folder(tmp_path, "test_a"), _run_folder(tmp_path, "test_b")
    (first / "faulthandler-123.txt").write_text("a dump")
    record.discard(first)
    now = tmp_path / "test_c" / "run-1"
    record.meanwhile(now, "test_d")
    assert sorted(path.name for path in first.iterdir()) == ["dump-spare.txt", "stdout.txt"]  # emptied, not removed
    assert (first / "stdout.txt").read_text() == ""
    assert (tmp_path / "test_d").is_dir()  # the next test's folder, made meanwhile
    record.discard(second)
    assert record.spare(now) == first  # the ready one; never the one as its run left it
    assert record.spare(now) is None


def test_in_a_session_of_passing_tests_each_run_gets_a_folder_emptied_before_it(tmp_path: Path) -> None:
    """The order of a forked test: its folder asked for, its child started, the session's work done meanwhile,
    its passed run's folder discarded. From the third test on, every run gets a spare, and it is empty
    already: nothing is truncated, made or removed on the test's own time."""
    record = SessionRecord(resolve(None), None, tmp_path)
    handed_out = []
    for number in range(6):
        run_dir = tmp_path / f"test_{number}" / "run-1"
        spare = record.spare(run_dir)
        if spare is not None:
            handed_out.append(number)
            assert all(path.stat().st_size == 0 for path in spare.iterdir()), sorted(spare.iterdir())
        files, events_fd = RunFiles.create(run_dir, reuse=spare)
        os.write(events_fd, b"{'event': 'started'}\n")  # what a run writes
        os.close(events_fd)
        files.stdout.write_text("output")
        record.meanwhile(run_dir, f"test_{number + 1}")
        record.discard(run_dir)
    assert handed_out == [2, 3, 4, 5]


def test_a_spare_whose_path_a_run_starts_in_is_never_handed_out(tmp_path: Path) -> None:
    record = SessionRecord(resolve(None), None, tmp_path)
    first = _run_folder(tmp_path, "test_a")
    record.discard(first)
    record.meanwhile(tmp_path / "test_b" / "run-1", None)
    assert record.spare(first) is None  # test_a runs again, in that very folder: its evidence is its own
    assert record.spare(tmp_path / "test_c" / "run-1") is None
    record.finish(interrupted=False)
    assert first.exists()  # the run's, not the record's


def test_a_spare_emptied_already_is_only_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked test's folder made of a spare (emptied while an earlier test's child ran) is not looked into
    again on the test's own time, and is as empty as a new one."""
    record = SessionRecord(resolve(None), None, tmp_path)
    first = _run_folder(tmp_path, "test_a")
    (first / "events.txt").write_text('{"event": "started"}\n')
    record.discard(first)
    run_dir = tmp_path / "test_b" / "run-1"
    record.meanwhile(run_dir, None)
    spare = record.spare(run_dir)
    assert spare == first

    def looked_again(folder: Path) -> bool:
        raise AssertionError(f"{folder} emptied a second time")

    monkeypatch.setattr(launch, "empty_run_folder", looked_again)
    files, events_fd = RunFiles.create(run_dir, reuse=spare, emptied=True)
    os.close(events_fd)
    assert not first.exists()
    assert all(path.stat().st_size == 0 for path in run_dir.iterdir()), sorted(run_dir.iterdir())
    assert files.events.read_text() == ""
