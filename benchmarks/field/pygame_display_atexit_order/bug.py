"""An exit handler registered before pygame draws on the display after pygame's atexit quit.

Upstream: pygame/pygame#3679 ("Segfault when trying to draw to screen after calling
pygame.quit", pygame 2.1.3.dev8, SDL 2.0.22), fixed by pygame/pygame#3755 ("Fix segfaults
when using display surface after calling pygame.quit"), which raises pygame.error instead.
pygame.base registers pygame.quit with atexit when it is imported ("When the Python
interpreter shuts down, this method is called regardless"). atexit runs callbacks in
reverse order of registration, so an exit handler registered before `import pygame` runs
after pygame.quit has shut the display down: the display Surface still points at the
freed SDL window surface, and pygame.draw.rect on it segfaults; pygame's parachute turns
the SIGSEGV into "Fatal Python error: pygame_parachute: (pygame parachute) Segmentation
Fault" (SIGABRT), inside the exit handler, at exit. (pygame arms its parachute only when no
other SIGSEGV handler is set: with faulthandler on it is a plain SIGSEGV.)
"""

import _recorder

_recorder.register_at_exit()  # registered now: runs after pygame's own atexit quit

import pygame  # noqa: E402  (pygame.base registers pygame.quit with atexit here)

pygame.init()
screen = pygame.display.set_mode((160, 100))
_recorder.attach(screen)
for frame in range(3):
    screen.fill((0, 0, 0))
    pygame.draw.circle(screen, (255, 255, 0), (20 + 40 * frame, 30), 10)
    pygame.display.flip()
print("game over; the recorder saves the last frame at exit", flush=True)
