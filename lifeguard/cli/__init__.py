"""The command line: main(argv) -> int."""

from lifeguard.cli.main import main

__all__ = ["main"]
