"""The subcommand base class: its docstring is its help, ``add_arguments`` its options, ``run`` its work."""

from __future__ import annotations

import argparse
import re
from typing import ClassVar

from lifeguard.plan.discover import PlainTarget


class Command:
    """A subcommand: the first line of the docstring is its one-line help, the rest its description."""

    name: ClassVar[str]
    usage: ClassVar[str | None] = None  # argparse's own usage line, unless the command line is not argparse's
    python_help: ClassVar[str] = "interpreter for the children (default: this one)"

    @classmethod
    def help(cls) -> str:
        return (cls.__doc__ or "").strip().split("\n\n")[0]

    @classmethod
    def description(cls) -> str:
        """The docstring's body (its paragraphs after the first line), else that line."""
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", (cls.__doc__ or "").strip())]
        return " ".join(" ".join(paragraphs[1:] or paragraphs[:1]).split())

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--python", metavar="PATH", help=self.python_help)

    def split(self, parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], PlainTarget | None]:
        """The words for argparse, and a plain target that takes the rest (only ``run`` has one)."""
        return argv, None

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError
