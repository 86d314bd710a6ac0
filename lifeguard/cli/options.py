"""Option types and the parser of the command line. The values are checked by lifeguard.model.validate,
the same validators the pytest plugin, the marker, the fixture and ``@scenario`` use."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from lifeguard.errors import ArgumentError, LifeguardError
from lifeguard.model.outcomes import Expectation
from lifeguard.model.validate import positive_count, positive_seconds, seed
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
positive_float = _argparse_type(positive_seconds, "positive_float")
seed_value = _argparse_type(seed, "seed_value")


def jobs_value(text: str) -> int:
    """``-j N`` or ``-j auto`` (the CPUs available)."""
    return default_jobs() if text == "auto" else positive_int(text)


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

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{self.prog}: {message}")
