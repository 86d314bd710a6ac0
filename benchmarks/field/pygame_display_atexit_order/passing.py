"""The same game as bug.py, with the recorder's hook registered through pygame.register_quit.

pygame.register_quit(fn) runs fn inside pygame.quit, before pygame's subsystems (the
display) shut down, whichever quit runs it: the atexit one here. The recorder stamps and
saves the last frame while the display surface is still alive, and the process exits 0.
(Registering the atexit handler after `import pygame` also works: it then runs first.)
"""

import _recorder
import pygame  # noqa: E402

pygame.register_quit(_recorder.save_last_frame)  # runs before the display is shut down

pygame.init()
screen = pygame.display.set_mode((160, 100))
_recorder.attach(screen)
for frame in range(3):
    screen.fill((0, 0, 0))
    pygame.draw.circle(screen, (255, 255, 0), (20 + 40 * frame, 30), 10)
    pygame.display.flip()
print("game over; the recorder saves the last frame when pygame quits", flush=True)
