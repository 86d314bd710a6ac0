"""The ``lifeguard`` command's entry point: the head start first, then the command line, then a quick exit.

Nothing of lifeguard but the head start (lifeguard.run.headstart) is imported before ``begin``: a wrapped
command starts at once and lifeguard loads while it runs. At the end the process exits as the interpreter
would, less the teardown of its modules (see ``exit_now``).
"""

from __future__ import annotations

import sys

from lifeguard.run import headstart

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> NoReturn:
    argv = sys.argv[1:]
    headstart.let_it_start(headstart.begin(argv))
    from lifeguard.cli.main import main as command_line

    exit_now(command_line(argv))


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` as the interpreter's own exit does (the program's other threads joined, the atexit
    callbacks: the session's containment, the watchdog), then end the process without finalizing its modules.

    The command line has written and closed all it writes by now (every report file, the relays' output files);
    the standard streams are flushed here. What is skipped is the interpreter's teardown of lifeguard's few
    hundred modules: 20-60 ms that a user who wrapped a command in ``lifeguard run`` would wait for."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # the reader went away, or the stream was closed: nothing more can be said there
    os._exit(code)
