"""The ``lifeguard`` command's entry point: the head start first, then the command line.

Nothing of lifeguard but the head start (lifeguard.run.headstart) is imported before ``begin``: a wrapped
command starts at once and lifeguard loads while it runs.
"""

from __future__ import annotations

import sys

from lifeguard.run import headstart


def main() -> int:
    argv = sys.argv[1:]
    headstart.begin(argv)
    from lifeguard.cli.main import main as command_line

    return command_line(argv)
