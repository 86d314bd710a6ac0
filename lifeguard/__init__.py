"""lifeguard: reproduce, catch and explain lifetime bugs in Python native extensions.

Kept tiny on purpose: scenario files and the child bootstrap import this package,
so it must import fast, under any supported interpreter, with no dependencies.
"""

import os

from lifeguard.child.protocol import CHILD_ENV, DISCOVER_ENV

TYPE_CHECKING = False  # typing itself costs the child start-up time; mypy knows this name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["__version__", "scenario"]
__version__ = "0.1.0"


def scenario(fixture: str | None = None, **options: "Any") -> "Callable[[Callable[..., Any]], Callable[..., Any]]":
    """Declare a scenario; see :func:`lifeguard.model.scenario.scenario` for the options."""
    if os.environ.get(DISCOVER_ENV):
        # The discovery process (lifeguard never imports a scenario file itself): record the arguments as
        # data; the supervisor checks them.
        from lifeguard.child.discovery import declare as record

        return record(fixture, options)
    if os.environ.get(CHILD_ENV):
        # Inside a supervised child the definition was already checked by the
        # supervisor; skip the bookkeeping so the child starts as fast as a bare one.
        return lambda func: func
    from lifeguard.model.scenario import scenario as declare

    return declare(fixture, **options)
