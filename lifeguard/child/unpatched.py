"""os functions lifeguard's own code calls in a run's process, as the interpreter made them.

A library may replace os's functions in the process it runs in: gevent's monkey-patching makes os.close refuse a
descriptor number it saw closed before (lifeguard's own close of a reused number raised in a test's process and
failed a test that passed), and its os.waitpid waits in its event loop, which a wait of lifeguard's must not
enter. posix's functions are the originals, whatever was done to os."""

from posix import close, waitpid

__all__ = ["close", "waitpid"]
