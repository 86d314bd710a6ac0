"""The head start (lifeguard.run.headstart) reads ``run``'s options before argparse exists: its two lists
must stay what ``run``'s parser says of each option, or a command line would be split differently."""

from __future__ import annotations

import argparse

from lifeguard.cli.main import build_parser
from lifeguard.run.headstart import FLAGS, VALUE_OPTIONS


def _run_options() -> dict[str, argparse.Action]:
    run = build_parser().subcommands["run"]
    return {name: action for action in run._actions for name in action.option_strings}


def test_each_flag_of_the_head_start_is_a_flag_of_run() -> None:
    options = _run_options()
    assert {flag: options[flag].nargs if flag in options else "not an option" for flag in FLAGS} == dict.fromkeys(
        FLAGS, 0)


def test_each_value_option_of_the_head_start_takes_one_value_in_run() -> None:
    options = _run_options()
    assert {name: options[name].nargs if name in options else "not an option" for name in VALUE_OPTIONS} == (
        dict.fromkeys(VALUE_OPTIONS, None))
