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
# A plain target run alone (a CI step) exits with the program's own code unless lifeguard found a lifetime
# problem: then this one, outside pytest's 0-5, sysexits' 64-78, the sanitizers' 23 and 66 and the shell's 126+.
EXIT_LIFETIME = 86


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


class ArgumentError(UsageError):
    """A command line argparse refused (the message is argparse's own)."""


class ScenarioDefinitionError(UsageError, ValueError):
    """A scenario is declared wrongly; the message names the file and line."""


class ScenarioFileError(ConfigurationError):
    """A scenario file did something at import that lifeguard cannot read declarations from (it exited,
    crashed, forked, hung or left processes running), or it declares no scenario a run can find."""

    HELP_TEXT = (
        "lifeguard imports a scenario file in a separate process only to read its @lifeguard.scenario "
        "declarations: keep its top level to imports and definitions, and do the work in the scenario bodies."
    )


class DiscoveryFailedError(LifeguardError):
    """The discovery process failed in lifeguard's own code, or could not start."""

    HELP_TEXT = "This is a bug in lifeguard (or a broken interpreter); please report it with the message above."


class MarkerError(UsageError):
    """A pytest marker, a marked test or a fixture call that cannot run as written; the message says where."""


class CaptureError(LifeguardError):
    """lifeguard cannot capture backtraces at all (not: one capture failed, that is data)."""

    EXIT_CODE = EXIT_USAGE  # an environment problem the user can fix


class GdbNotFoundError(CaptureError):
    """No working gdb on PATH."""

    HELP_TEXT = (
        "lifeguard uses gdb (12 or newer, built with Python) for native backtraces. "
        "Install it (Debian/Ubuntu: apt-get install gdb; Fedora: dnf install gdb; "
        "conda: conda install -c conda-forge gdb), or put it on PATH."
    )


class BuildCacheError(LifeguardError):
    """The fixture build cache cannot be written; the message names the folder and the way to move it."""

    EXIT_CODE = EXIT_USAGE  # an environment problem the user can fix


class ClusterError(UsageError):
    """The Dask cluster of ``--scheduler`` cannot be used (not installed, not reachable, no answer)."""

    HELP_TEXT = ("Start a scheduler and workers that can import lifeguard (`dask scheduler`, `dask worker ADDRESS`), "
                 "and pass the scheduler's address: lifeguard run --scheduler tcp://HOST:8786 ...")


class MergeError(UsageError):
    """`lifeguard merge` was given folders that are not the shards of one whole plan; the message says which."""

    HELP_TEXT = ("Pass the --report folder of every shard of one plan, each written by `lifeguard run --shard K/N "
                 "--report DIR` with the same scenarios, options, lifeguard and interpreter.")


class ReportDirError(ConfigurationError):
    """The report folder (``--report``, ``--lifeguard-report``) cannot be written; the message says why."""


class DiskFullError(LifeguardError):
    """The disk under lifeguard's files is full (ENOSPC, or a quota): the session stops with every finished
    run's line of results.jsonl whole."""

    EXIT_CODE = EXIT_USAGE  # an environment problem the user can fix

    def __init__(self, path: object) -> None:
        self.path = str(path)
        super().__init__(f"no space left on the disk of {self.path}: the session stopped (results.jsonl holds "
                         "whole lines only); free space on that disk or write the report to another one "
                         "(--report DIR)")


class SurveyError(UsageError):
    """`lifeguard survey` cannot start: a package not installed, a hooks or limitations file that is wrong, or
    an inventory of the target interpreter that failed; the message says which."""

    HELP_TEXT = ("Name installed distributions (pip list in the target interpreter shows them), pick that "
                 "interpreter with --python, and check the files given with --hooks and --limitations.")
