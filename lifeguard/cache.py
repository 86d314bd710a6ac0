"""Where lifeguard keeps built fixtures and tool caches."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "LIFEGUARD_CACHE"


def cache_dir() -> Path:
    """``$LIFEGUARD_CACHE``, else ``$XDG_CACHE_HOME/lifeguard``, else ``~/.cache/lifeguard``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lifeguard"
