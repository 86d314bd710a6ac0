"""A tiny session recorder: keeps the game's display and saves a last frame when the game ends.

Shared by bug.py and passing.py. Like a crash reporter or a replay/screenshot helper imported
at the top of a game, it registers its exit handler when it is imported, before pygame is;
at exit it stamps "GAME OVER" (a filled bar) on the display surface and saves the frame.
"""

import atexit
import os
import tempfile

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # no display needed
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

STATE: dict = {}


def attach(screen) -> None:
    STATE["screen"] = screen


def save_last_frame() -> None:
    import pygame

    screen = STATE.get("screen")
    if screen is None:
        return
    print("recorder: stamping and saving the last frame", flush=True)
    pygame.draw.rect(screen, (200, 0, 0), pygame.Rect(0, 40, 160, 20))  # the "GAME OVER" bar
    path = os.path.join(tempfile.gettempdir(), f"last-frame-{os.getpid()}.bmp")
    pygame.image.save(screen, path)
    os.unlink(path)
    print("recorder: saved", flush=True)


def register_at_exit() -> None:
    atexit.register(save_last_frame)
