"""``lifeguard`` command line: ``main(argv) -> int``, the exit codes of DESIGN.md."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from lifeguard import __version__
from lifeguard.cli.commands import COMMANDS
from lifeguard.cli.options import Parser
from lifeguard.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, LifeguardError, UsageError
from lifeguard.report.escape import for_terminal
from lifeguard.report.stream import SafeOutput
from lifeguard.run.shutdown import shutdown


def build_parser() -> Parser:
    parser = Parser(prog="lifeguard", description="Reproduce, catch and explain lifetime bugs in Python "
                    "native extensions: crashes at exit, deadlocks at fork, gc on the wrong thread.")
    parser.add_argument("--version", action="version", version=f"lifeguard {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help(), description=command.description(),
                                    usage=command.usage)
        command.add_arguments(sub)
        sub.set_defaults(handler=command)
        parser.subcommands[command.name] = sub
    return parser


def parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """argparse, after the subcommand has split off a plain target and its words (``run script.py ARGS``):
    argparse would take them for lifeguard's own."""
    position = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    plain = None
    if position is not None and argv[position] in parser.subcommands:
        sub = parser.subcommands[argv[position]]
        command = next(c for c in COMMANDS if c.name == argv[position])
        own, plain = command.split(sub, argv[position + 1:])
        argv = [*argv[:position + 1], *own]
    args = parser.parse_args(argv)
    args.plain = plain
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Stop signals end a session like Ctrl-C (lifeguard.run.shutdown): every child killed, what finished
    written, and the shell's code for the first signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT)."""
    parser = build_parser()
    shutdown.install()
    code = _main(parser, argv)
    shutdown.stop_timer()
    if shutdown.exit_code is not None:
        return shutdown.exit_code
    return code


def _main(parser: Parser, argv: Sequence[str] | None) -> int:
    try:
        args = parse(parser, list(sys.argv[1:] if argv is None else argv))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        _check_folder()
        return int(args.handler.run(args))
    except LifeguardError as exc:
        _say(f"lifeguard: error: {exc}")
        if exc.HELP_TEXT:
            _say(f"lifeguard: {exc.HELP_TEXT}")
        return exc.EXIT_CODE
    except KeyboardInterrupt:
        _say("lifeguard: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `lifeguard list | head -1`: the reader has what it wanted
        SafeOutput(sys.stdout).silence()  # and the interpreter's last flush must not fail (exit 120)
        return EXIT_OK
    except Exception:
        traceback.print_exc()
        print("lifeguard: internal error (a bug in lifeguard); please report it with the traceback above",
              file=sys.stderr)
        return EXIT_INTERNAL


def _check_folder() -> None:
    """Every command works in or from the current folder: one that was deleted is said at once."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current folder no longer exists (it was deleted or moved): cd into one that "
                         "does") from None


def _say(text: str) -> None:
    """One of lifeguard's own lines on stderr: a name or message from a scenario file shown, never acted on;
    a stderr whose reader went away costs the line, not the exit code."""
    SafeOutput(sys.stderr).write(for_terminal(text) + "\n")


if __name__ == "__main__":
    sys.exit(main())
