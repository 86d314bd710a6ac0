"""The pytest plugin's session record: passed runs' folders are removed later, while the next forked test's
child starts, and never the folder of the run starting then."""

from __future__ import annotations

from pathlib import Path

from lifeguard.interpreter import resolve
from lifeguard.pytest_plugin.session_report import SessionRecord


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
