"""Option types and the parser of the command line. The values are checked by lifeguard.model.validate,
the same validators the pytest plugin, the marker, the fixture and ``@scenario`` use."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from lifeguard.errors import ArgumentError, LifeguardError
from lifeguard.model.outcomes import Expectation
from lifeguard.model.run import RunKind
from lifeguard.model.validate import jobs, positive_count, positive_seconds, seed, shard
from lifeguard.plan.discover import PlainTarget
from lifeguard.plan.perturbations import parse_perturbations

T = TypeVar("T")


def _argparse_type(validator: Callable[[Any, str], T], name: str) -> Callable[[str], T]:
    """An argparse ``type=`` from a validator; argparse itself names the option in the message."""

    def convert(text: str) -> T:
        try:
            return validator(text, "")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name  # argparse shows it for a value it cannot convert
    return convert


positive_int = _argparse_type(positive_count, "positive_int")
jobs_count = _argparse_type(jobs, "jobs_count")
positive_float = _argparse_type(positive_seconds, "positive_float")
seed_value = _argparse_type(seed, "seed_value")
shard_value = _argparse_type(shard, "shard_value")


def folder_path(text: str) -> Path:
    """A folder lifeguard writes (``--report DIR``): an empty value is refused, not read as the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder")
    return Path(text)


def jobs_value(text: str) -> int:
    """``-j N`` or ``-j auto`` (the CPUs available)."""
    return default_jobs() if text == "auto" else jobs_count(text)


def expectation_text(text: str) -> str:
    """``--expect OUTCOME[@PHASE]`` (``hung@fork-child``, ``sometimes:corrupted``), checked, as written back."""
    try:
        return str(Expectation.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def perturbation_list(text: str) -> tuple[str, ...]:
    try:
        return parse_perturbations(text)
    except LifeguardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2, with no traceback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommands: dict[str, argparse.ArgumentParser] = {}  # name -> its parser (the top level's)

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{self.prog}: {message}")


# The words that start a plain target other than a script: what follows them belongs to the target.
MODULE_FLAG, CODE_FLAG, COMMAND_MARK = "-m", "-c", "--"


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _long_option(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    """The action of ``--name`` (or of a unique prefix of one, as argparse allows)."""
    actions = parser._option_string_actions
    if word in actions:
        return actions[word]
    matches = {actions[o] for o in actions if o.startswith("--") and o.startswith(word)}
    return matches.pop() if len(matches) == 1 else None


def _value(argv: list[str], index: int, flag: str) -> str:
    if index >= len(argv):
        raise ArgumentError(f"{flag} needs a value")
    return argv[index]


def split_plain_target(parser: argparse.ArgumentParser, argv: list[str],
                       is_plain_script: Callable[[str], bool]) -> tuple[list[str], PlainTarget | None]:
    """Split ``lifeguard run``'s words as Python splits its own command line: lifeguard's options and
    scenario targets, then a plain target (``script.py``, ``-m MODULE``, ``-c CODE`` or ``-- COMMAND``) and
    every word after it, which are the target's own, even those that look like lifeguard's options."""
    own: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == COMMAND_MARK:
            rest = argv[index + 1:]
            if not rest:
                raise ArgumentError("-- must be followed by a command: lifeguard run [OPTIONS] -- COMMAND [ARGS...]")
            return own, PlainTarget(RunKind.COMMAND, rest[0], tuple(rest[1:]))
        if word.startswith("--"):
            action = _long_option(parser, word.partition("=")[0])
            own.append(word)
            if action is not None and _takes_value(action) and "=" not in word:
                own.append(_value(argv, index + 1, word))
                index += 1
            index += 1
            continue
        if word.startswith("-") and len(word) > 1:
            # A cluster of short options (-vq, -j2, -kEXPR, -cCODE): each letter up to one that takes a value.
            for position in range(1, len(word)):
                flag = "-" + word[position]
                attached = word[position + 1:]
                if flag in (MODULE_FLAG, CODE_FLAG):
                    if position > 1:
                        own.append(word[:position])
                    value = attached or _value(argv, index + 1, flag)
                    rest = argv[index + (1 if attached else 2):]
                    return own, PlainTarget(RunKind.MODULE if flag == MODULE_FLAG else RunKind.CODE, value,
                                                    tuple(rest))
                action = parser._option_string_actions.get(flag)
                if action is not None and _takes_value(action):
                    if attached:
                        own.append(word)
                    else:
                        own += [word, _value(argv, index + 1, flag)]
                        index += 1
                    break
            else:
                own.append(word)
            index += 1
            continue
        if is_plain_script(word):
            return own, PlainTarget(RunKind.SCRIPT, word, tuple(argv[index + 1:]))
        own.append(word)
        index += 1
    return own, None
