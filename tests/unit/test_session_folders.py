"""Session folders without a report folder: numbered under one private base per user, the last few kept, a
live session's never removed, a base another user could have made never used. Real files and flocks."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from lifeguard import cache


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(cache, "_held", [])
    return tmp_path


def _release() -> None:
    while cache._held:
        os.close(cache._held.pop())


def test_sessions_are_numbered_and_the_last_three_kept(tmpdir_env: Path) -> None:
    made = []
    for _ in range(5):
        made.append(cache.session_folder())
        _release()  # that session ended
    base = tmpdir_env / f"lifeguard-{os.getuid()}"
    assert made == [str(base / f"session-{n}") for n in range(1, 6)]
    assert (base.stat().st_mode & 0o777) == 0o700
    removed = cache.prune_sessions()
    assert removed == made[:2]
    assert sorted(p.name for p in base.iterdir()) == ["session-3", "session-4", "session-5"]


def test_a_live_sessions_folder_is_kept_however_old(tmpdir_env: Path) -> None:
    live = cache.session_folder()  # held: this process's session goes on
    for _ in range(4):
        cache.session_folder()
    held, ended = cache._held[0], cache._held[1:]
    for fd in ended:  # the later four sessions ended
        os.close(fd)
    cache._held[:] = [held]
    try:
        removed = cache.prune_sessions()
        assert live not in removed and Path(live).is_dir()
        assert [Path(p).name for p in removed] == ["session-2"]
    finally:
        os.close(held)
        cache._held.clear()
    assert cache.prune_sessions() == [live]  # ended now


def test_a_folder_without_a_lock_is_kept_until_it_is_old(tmpdir_env: Path) -> None:
    base = Path(cache.sessions_base() or "")
    for n in range(1, 5):
        (base / f"session-{n}").mkdir()
    assert cache.prune_sessions() == []  # being made, perhaps
    old = 1_000_000_000
    os.utime(base / "session-1", (old, old))
    assert cache.prune_sessions() == [str(base / "session-1")]


def test_a_base_not_private_to_this_user_is_never_used(tmpdir_env: Path) -> None:
    elsewhere = tmpdir_env / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "session-1").mkdir()
    (elsewhere / "session-1" / "data.txt").write_text("theirs")
    (tmpdir_env / f"lifeguard-{os.getuid()}").symlink_to(elsewhere)
    folder = Path(cache.session_folder())
    assert folder.parent == tmpdir_env and folder.name.startswith("lifeguard-runs-")
    assert cache.prune_sessions(keep=0) == []
    assert (elsewhere / "session-1" / "data.txt").read_text() == "theirs"
    os.unlink(tmpdir_env / f"lifeguard-{os.getuid()}")
    (tmpdir_env / f"lifeguard-{os.getuid()}").mkdir(mode=0o755)
    os.chmod(tmpdir_env / f"lifeguard-{os.getuid()}", 0o755)  # readable by others: not private
    assert Path(cache.session_folder()).name.startswith("lifeguard-runs-")


def test_the_lock_of_a_session_is_held_by_its_process(tmpdir_env: Path) -> None:
    folder = Path(cache.session_folder())
    fd = os.open(folder / cache.SESSION_LOCK, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
        _release()
