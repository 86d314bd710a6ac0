"""Who called ``os._exit``: a process that ends so skips the rest of its body and its whole exit (atexit,
finalization, static destructors), and the supervisor sees only an exit status. The wrapper reports the
call's status and the caller's frames on the result channel (protocol.OS_EXIT), then exits as asked.

Standard library and ``lifeguard.child`` only.
"""

import os
import sys

from lifeguard.child import emit, protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import NoReturn

MAX_FRAMES = 8  # the caller's frames kept, innermost first


def watch() -> None:
    """Wrap ``os._exit`` in this process (its forked children inherit the wrapper)."""
    real = os._exit
    if getattr(real, "_lifeguard_watch", False):
        return

    def _exit(status: int) -> "NoReturn":
        try:
            frames: list[str] = []
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and len(frames) < MAX_FRAMES:
                code = frame.f_code
                frames.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
                frame = frame.f_back
            emit(protocol.OS_EXIT, status=int(status), stack=frames)
        except BaseException:  # the report is best effort; the exit is the program's
            pass
        real(status)

    _exit.__doc__ = real.__doc__
    _exit._lifeguard_watch = True  # type: ignore[attr-defined]
    _exit.__wrapped__ = real  # type: ignore[attr-defined]
    os._exit = _exit


def unwatch() -> None:
    """``os._exit`` as it was before ``watch``, unless the program has put its own in since."""
    if getattr(os._exit, "_lifeguard_watch", False):
        os._exit = os._exit.__wrapped__  # type: ignore[attr-defined]
