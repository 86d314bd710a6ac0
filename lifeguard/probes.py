"""Probes for users' own extension modules (exit, fork, gc-thread)."""

from __future__ import annotations

import argparse

from lifeguard.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("module", metavar="MODULE", help="the extension module to probe")


def cli_main(args: argparse.Namespace) -> int:
    raise UsageError("lifeguard probe is not available yet")
