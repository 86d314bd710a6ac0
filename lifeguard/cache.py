"""Where lifeguard keeps what it makes once and reuses (fixture builds, the children's path link).

Standard library ``os`` only: the head start (lifeguard.run.headstart) reads it before anything else of
lifeguard is imported.
"""

from __future__ import annotations

import os

CACHE_ENV = "LIFEGUARD_CACHE"


def cache_folder() -> str:
    """``$LIFEGUARD_CACHE``, else ``$XDG_CACHE_HOME/lifeguard``, else ``~/.cache/lifeguard``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lifeguard")
