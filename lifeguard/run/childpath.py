"""The folders every child's start names: the link to this package on a child's sys.path, and the site hook
that attaches each Python process of a plain run.

Standard library and ``lifeguard.child.protocol`` only (no pathlib, no dataclasses): the head start
(lifeguard.run.headstart) needs these paths before the rest of lifeguard is imported, and they must be the
very ones a normal start uses (lifeguard.run.launch).
"""

from __future__ import annotations

import _thread
import os
import zlib

from lifeguard.cache import cache_folder
from lifeguard.child import protocol

_made: dict[str, str] = {}  # what this process already made: each folder is checked once


def package_folder() -> str:
    """This lifeguard package's folder, links resolved."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def child_path_folder() -> str:
    """A folder holding only a link to this package, for the child's sys.path.

    Putting the supervisor's site-packages on a child's path would mix in extension modules built for
    another interpreter (with --python).
    """
    known = _made.get("path")
    if known is not None:
        return known
    package = package_folder()
    folder = os.path.join(cache_folder(), "childpath", f"{zlib.crc32(package.encode()):08x}")
    link = os.path.join(folder, "lifeguard")
    if not os.path.exists(link):
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".lifeguard.{os.getpid()}.{_thread.get_ident()}")
        os.symlink(package, tmp)
        os.replace(tmp, link)
    _made["path"] = folder
    return folder


SITE_HOOK = """\
# Written by lifeguard: attaches this Python process to the supervised run that started it
# (lifeguard/child/attach.py), then steps aside.
import sys
sys.path.insert(0, {path_dir!r})
try:
    from lifeguard.child import attach
finally:
    sys.path.remove({path_dir!r})
attach.main({hook_dir!r})
"""


def site_hook_folder() -> str:
    """The folder put first on a plain run's PYTHONPATH: only a sitecustomize.py that attaches each Python
    process of the run's tree (child.attach), written when it is missing or not this version's."""
    known = _made.get("hook")
    if known is not None:
        return known
    path_dir = child_path_folder()
    folder = os.path.join(path_dir, protocol.SITE_HOOK_DIR)
    hook = os.path.join(folder, protocol.SITE_HOOK_FILE)
    text = SITE_HOOK.format(path_dir=path_dir, hook_dir=folder)
    try:
        with open(hook, encoding="utf-8") as f:
            current = f.read()
    except OSError:
        current = None
    if current != text:
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{protocol.SITE_HOOK_FILE}.{os.getpid()}.{_thread.get_ident()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, hook)
    _made["hook"] = folder
    return folder
