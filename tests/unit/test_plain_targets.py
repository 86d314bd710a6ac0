"""Plain targets on the command line, split as Python splits its own: lifeguard's options first, then the
target, and every word after it is the target's. Pure logic: the parser, the splitter, the text escaper."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeguard.cli.main import build_parser, parse
from lifeguard.errors import ArgumentError
from lifeguard.plan.discover import PlainTarget, is_plain_script
from lifeguard.report.escape import for_terminal as visible


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "repro.py").write_text("import sys\nprint(sys.argv)\n")
    (tmp_path / "cases.py").write_text("import lifeguard\n\n@lifeguard.scenario()\ndef case():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    return "repro.py"


def split(*words: str) -> tuple[list[str], PlainTarget | None]:
    args = parse(build_parser(), ["run", *words])
    return list(args.targets), args.plain


def test_everything_after_a_script_is_the_scripts(script: str) -> None:
    args = parse(build_parser(), ["run", "--timeout", "5", "-q", script, "--timeout", "0", "--fixed", "-x"])
    assert args.timeout == 5 and args.quiet and not args.exitfirst
    assert args.plain == PlainTarget("script", script, ("--timeout", "0", "--fixed", "-x"))
    assert args.targets == []


@pytest.mark.parametrize(("words", "target"), [
    (["-m", "pytest", "-x", "tests/"], PlainTarget("module", "pytest", ("-x", "tests/"))),
    (["-mpytest", "-q"], PlainTarget("module", "pytest", ("-q",))),
    (["-c", "import sys", "a", "--report", "r"], PlainTarget("code", "import sys", ("a", "--report", "r"))),
    (["-qc", "pass", "-v"], PlainTarget("code", "pass", ("-v",))),
    (["--", "pytest", "-x", "--timeout", "3"], PlainTarget("command", "pytest", ("-x", "--timeout", "3"))),
    (["-j2", "--timeout=4", "-k", "fork", "--", "sh", "ci.sh"], PlainTarget("command", "sh", ("ci.sh",))),
])
def test_module_code_and_command_targets(words: list[str], target: PlainTarget) -> None:
    assert split(*words)[1] == target


def test_an_option_value_is_never_taken_for_a_target(script: str) -> None:
    # -k's value and --report's are lifeguard's, even when they look like a module flag or a script.
    args = parse(build_parser(), ["run", "-k=-m", "--report", script, "cases.py", "-v"])
    assert args.keyword == "-m" and args.report == Path(script) and args.verbose
    assert args.targets == ["cases.py"] and args.plain is None


def test_scenario_targets_keep_options_anywhere(script: str) -> None:
    args = parse(build_parser(), ["run", "cases.py", "cases.py::case", "--repeat", "3", "-x", script, "-x"])
    assert args.targets == ["cases.py", "cases.py::case"] and args.repeat == 3 and args.exitfirst
    assert args.plain == PlainTarget("script", script, ("-x",))


def test_what_is_a_plain_script(script: str, tmp_path: Path) -> None:
    assert is_plain_script(script)
    assert not is_plain_script("cases.py") and not is_plain_script("cases.py::case")
    assert not is_plain_script("missing.py") and not is_plain_script(str(tmp_path))
    (tmp_path / "broken.py").write_text("def (:\n")
    assert is_plain_script("broken.py")  # run as python runs it: its own SyntaxError, exit 1
    (tmp_path / "broken_cases.py").write_text("import lifeguard\ndef (:\n")
    assert not is_plain_script("broken_cases.py")  # a scenario file: left to discovery, which names the line


@pytest.mark.parametrize("words", [["-m"], ["-c"], ["--"], ["--timeout"]])
def test_a_target_flag_without_its_value_is_a_usage_error(words: list[str]) -> None:
    with pytest.raises(ArgumentError):
        parse(build_parser(), ["run", *words])


def test_other_subcommands_split_nothing(script: str) -> None:
    args = parse(build_parser(), ["list", script, "-k", "x"])
    assert args.targets == [script] and args.keyword == "x" and args.plain is None


def test_control_characters_are_shown_not_acted_on() -> None:
    assert visible("\x1b[2J\x1b]0;title\x07red") == "\\x1b[2J\\x1b]0;title\\x07red"
    assert visible("ok\r\nprogress\rdone\tx\n") == "ok\nprogress\\rdone\tx\n"
    assert visible("\x00\x7f\x9b\u202egnp.exe") == "\\x00\\x7f\\x9b\\u202egnp.exe"
    assert visible("caf\u00e9 \u2713") == "caf\u00e9 \u2713"


def test_a_runs_seed_is_randoms_string_seeding() -> None:
    """lifeguard.model.seeds derives a run's seed without importing random (the head start does it before the
    rest of lifeguard is loaded); it must be what random's own string seeding gives, on every Python."""
    import random

    from lifeguard.model.seeds import run_seed

    for base in (0, 1, 2**32 - 1, 3166219500):
        for name in ("python3", "sh", "a.b-c_d"):
            for index in (0, 7):
                expected = random.Random(f"{base}:{name}:default:{index}").getrandbits(32)
                assert run_seed(base, name, "default", index) == expected
