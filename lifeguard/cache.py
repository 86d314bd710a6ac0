"""Where lifeguard keeps what it makes: what it makes once and reuses (fixture builds, the children's path
link), and the folders of sessions run without a report folder.

Standard library ``os`` and ``fcntl`` only: the head start (lifeguard.run.headstart) reads it before anything
else of lifeguard is imported.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

CACHE_ENV = "LIFEGUARD_CACHE"
SESSIONS_KEPT = 3  # a user's last sessions' folders kept, as pytest keeps its last 3 base folders
SESSION_PREFIX = "session-"
SESSION_LOCK = ".session.lock"
ABANDONED_AFTER = 3600.0  # seconds: a session folder never locked (its process died while making it) is old
_held: list[int] = []  # this process's session folders' locks, held until it exits


def cache_folder() -> str:
    """``$LIFEGUARD_CACHE``, else ``$XDG_CACHE_HOME/lifeguard``, else ``~/.cache/lifeguard``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lifeguard")


def session_folder() -> str:
    """A new folder for the runs of a session without a report folder: ``lifeguard-UID/session-N`` in the
    temporary folder, numbered on, locked by this process until it exits (another session's prune leaves it).
    Where that base cannot be trusted (not a private folder of this user's), a unique folder beside it."""
    base = sessions_base()
    if base is None:
        return _unique_folder(_temporary_root())
    for _ in range(100):
        number = 1 + max((_number(name) for name in os.listdir(base)), default=0)
        path = os.path.join(base, f"{SESSION_PREFIX}{number}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue  # another session took this number first
        fd = os.open(os.path.join(path, SESSION_LOCK), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        _held.append(fd)
        return path
    raise FileExistsError(base)


def prune_sessions(keep: int = SESSIONS_KEPT) -> list[str]:
    """Remove the session folders older than the newest ``keep`` whose session has ended (its lock is free);
    return those removed."""
    import shutil  # not at import: the head start never prunes

    base = sessions_base(create=False)
    if base is None:
        return []
    numbered = sorted((_number(name), name) for name in os.listdir(base) if _number(name))
    removed = []
    for _, name in numbered[:-keep] if keep > 0 else numbered:
        path = os.path.join(base, name)
        if _ended(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def sessions_base(create: bool = True) -> str | None:
    """``lifeguard-UID`` in the temporary folder, if it is (or is now made) a private folder of this user's:
    another user could have made that name first, as a folder or a symbolic link."""
    base = os.path.join(_temporary_root(), f"lifeguard-{os.getuid()}")
    if create:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        info = os.lstat(base)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return base


def _ended(path: str) -> bool:
    """Has the session of folder ``path`` ended: its lock free, or never made and the folder old?"""
    try:
        fd = os.open(os.path.join(path, SESSION_LOCK), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            return time.time() - os.lstat(path).st_mtime > ABANDONED_AFTER
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # a live session holds it
    finally:
        os.close(fd)


def _number(name: str) -> int:
    digits = name[len(SESSION_PREFIX):] if name.startswith(SESSION_PREFIX) else ""
    return int(digits) if digits.isdigit() and len(digits) < 12 else 0


def _temporary_root() -> str:
    """Where tempfile.mkdtemp would make a folder (without importing tempfile and what it imports)."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        base = os.environ.get(name, "")
        if base:
            return os.path.abspath(base)
    return "/tmp"


def _unique_folder(base: str) -> str:
    for _ in range(100):
        path = os.path.join(base, f"lifeguard-runs-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(base)
