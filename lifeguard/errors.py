"""lifeguard's own errors. Outcomes of runs are data, never exceptions.

Each error carries a HELP_TEXT that tells the user what to try; the CLI prints the
message and the help, and maps the class to an exit code (see DESIGN.md).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class LifeguardError(Exception):
    """Base class: something lifeguard could not do."""

    HELP_TEXT = ""
    EXIT_CODE = EXIT_INTERNAL


class UsageError(LifeguardError):
    """Bad command-line input, bad scenario definition or unknown names."""

    EXIT_CODE = EXIT_USAGE


class ConfigurationError(UsageError):
    """A scenario file or option value is wrong."""


class InterpreterError(LifeguardError):
    """The interpreter chosen with --python cannot be used."""

    EXIT_CODE = EXIT_USAGE
    HELP_TEXT = "Pass --python the path of a CPython 3.10+ interpreter (or a venv's bin/python)."


class BuildError(LifeguardError):
    """A fixture could not be compiled; the message holds the compiler's own output."""

    EXIT_CODE = EXIT_USAGE
    HELP_TEXT = (
        "Fixtures need a C/C++ compiler and the interpreter's headers "
        "(Debian: apt-get install g++ python3-dev). Set CC / CXX to choose the compiler."
    )
