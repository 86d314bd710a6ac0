"""The documentation: README.md stays short and its links resolve, the MkDocs site (mkdocs.yml, docs/) builds
with --strict, and every shell example names real subcommands and options.

Nothing here starts a process (tests/unit/): the site is built by mkdocs' own build() in this process, as
`python3 -m mkdocs build --strict` builds it, and a subcommand's --help is the text of lifeguard's own parser,
the one `lifeguard SUBCOMMAND --help` prints.

A fenced block whose info string is `sh`, `bash`, `shell` or `console` is checked command by command:
- `lifeguard SUBCOMMAND ...` / `python3 -m lifeguard SUBCOMMAND ...`: the subcommand exists and every option
  before a plain target (`lifeguard run script.py ARGS`, `-m`, `-c`, `--`: the rest is the target's own)
  appears in that subcommand's --help;
- `pytest ...` / `python3 -m pytest ...`: every `--lifeguard...` option is one the plugin adds;
- `pip install ...` / `python3 -m pip install ...`: what it installs is lifeguard (`.` or `lifeguard`) with
  extras pyproject.toml declares;
- a tool the `test` extra installs (ruff, mypy).
Anything else is refused: a block meant only as illustration has the info string `text`, or the line before
it is `<!-- illustrative -->`. Every fenced block has an info string, so none escapes by having none.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.helpers import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

README = ROOT / "README.md"
README_LIMIT = 15_000  # bytes: what, install, quick start, the ways to use it, links; the rest is in docs/
DOCS = ROOT / "docs"
MARKDOWN = [README, *sorted(DOCS.glob("*.md"))]
SHELL_INFO = {"sh", "bash", "shell", "console"}
ILLUSTRATIVE = "<!-- illustrative -->"
OPERATORS = {"&&", "||", ";", "|", "&"}
PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- the site -------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_site_builds_with_strict(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    config = load_config(config_file=str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    assert config.strict and Path(config.docs_dir) == DOCS
    caplog.set_level(logging.WARNING, logger="mkdocs")
    config.plugins.on_startup(command="build", dirty=False)
    try:
        build(config)
    except Abort as exc:
        warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        pytest.fail(f"mkdocs build --strict failed: {exc}\n{warnings}")
    finally:
        config.plugins.on_shutdown()
    assert (tmp_path / "site" / "index.html").is_file()


# --- README.md ------------------------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes (at most {README_LIMIT}): move the detail to docs/"


def _relative_links(path: Path) -> Iterator[str]:
    for target in LINK.findall(path.read_text()):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
            yield target.partition("#")[0]


def test_the_readme_links_to_files_that_exist() -> None:
    links = list(_relative_links(README))
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    unlinked = {_name(page) for page in DOCS.glob("*.md")} - {str(Path(link)) for link in links}
    assert not unlinked, f"README.md links to no page {sorted(unlinked)}"


# --- shell examples -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    illustrative: bool
    text: str

    def __str__(self) -> str:
        return f"{_name(self.path)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence, info = opening.groups()
        previous = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[index + 1:end]]
        blocks.append(Block(path, index + 1, info.strip().split(" ")[0] if info.strip() else "",
                            previous == ILLUSTRATIVE, "\n".join(body)))
        index = end + 1
    return blocks


def command_lines(block: Block) -> Iterator[str]:
    """The commands of a block, continuation lines joined; a console block's are those after its `$ `."""
    pending = ""
    for raw in block.text.splitlines():
        line = raw.rstrip()
        if block.info == "console" and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip() and not line.lstrip().startswith("#"):
            yield line
    if pending.strip():
        yield pending


def simple_commands(line: str) -> Iterator[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for token in lexer:
        if token in OPERATORS:
            if words:
                yield words
            words = []
        else:
            words.append(token)
    if words:
        yield words


@cache
def _parser() -> Any:
    from lifeguard.cli.main import build_parser

    return build_parser()


@cache
def subcommand_help(name: str) -> str:
    """What `lifeguard NAME --help` prints (lifeguard's own parser, formatted here)."""
    return str(_parser().subcommands[name].format_help())


def _plain_script(word: str) -> bool:
    """A `.py` target that is not one of the project's scenario files (an example's `script.py`, `repro.py`):
    the words after it are its own, as `lifeguard run` reads them."""
    from lifeguard.plan.discover import is_plain_script

    path = ROOT / word
    return word.endswith(".py") and "::" not in word and (not path.is_file() or is_plain_script(str(path)))


def check_lifeguard(words: list[str]) -> list[str]:
    from lifeguard.cli.options import split_plain_target
    from lifeguard.errors import LifeguardError

    if not words or words[0] in ("--help", "-h", "--version"):
        return []
    name, rest = words[0], words[1:]
    if name not in _parser().subcommands:
        return [f"`lifeguard {name}` is no subcommand (there are: {', '.join(_parser().subcommands)})"]
    if name == "run":
        try:
            rest, _plain = split_plain_target(_parser().subcommands[name], rest, _plain_script)
        except LifeguardError as exc:
            return [f"`lifeguard run {' '.join(rest)}`: {exc}"]
    problems = []
    for word in rest:
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d+(\.\d+)?", word):
            continue
        option = word.partition("=")[0] if word.startswith("--") else word[:2]
        if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", subcommand_help(name)):
            problems.append(f"`lifeguard {name}` has no option {option} (not in `lifeguard {name} --help`)")
    return problems


class _OptionRecorder:
    """Stands in for pytest's parser and its option group: records the option names the plugin adds."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def getgroup(self, *_args: Any, **_kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **_kwargs: Any) -> None:
        self.names.update(names)

    def addini(self, *_args: Any, **_kwargs: Any) -> None:
        pass


@cache
def plugin_options() -> frozenset[str]:
    from lifeguard.pytest_plugin import hooks

    recorder = _OptionRecorder()
    hooks.pytest_addoption(recorder, object())  # type: ignore[arg-type]
    return frozenset(recorder.names)


def check_pytest(words: list[str]) -> list[str]:
    return [f"the pytest plugin has no option {word.partition('=')[0]}" for word in words
            if word.startswith("--lifeguard") and word.partition("=")[0] not in plugin_options()]


@cache
def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def check_pip(words: list[str]) -> list[str]:
    if not words or words[0] != "install":
        return [f"`pip {' '.join(words)}`: only `pip install` of lifeguard can be checked"]
    extras = set(_project()["optional-dependencies"])
    problems = []
    for word in words[1:]:
        if word.startswith("-"):
            continue
        what = re.fullmatch(r"([^\[\]]+)(?:\[([^\]]*)\])?", word)
        if what is None or what.group(1) not in (".", "lifeguard"):
            problems.append(f"`pip install {word}`: only lifeguard itself (`.` or `lifeguard`) can be checked")
            continue
        problems += [f"lifeguard has no extra [{extra}] in pyproject.toml"
                     for extra in (what.group(2) or "").split(",") if extra and extra not in extras]
    return problems


@cache
def extra_tools() -> frozenset[str]:
    """The commands the `test` extra installs (its requirements' names)."""
    extras = _project()["optional-dependencies"]
    names: set[str] = set()
    pending = ["test"]
    while pending:  # the extra's own lifeguard[...] parts included
        for requirement in map(Requirement, extras[pending.pop()]):
            if requirement.name == "lifeguard":
                pending.extend(requirement.extras)
            else:
                names.add(requirement.name)
    return frozenset(names)


def check_script(path: str, args: list[str]) -> list[str]:
    """A project script exists and its subcommand is one its usage names."""
    script = ROOT / path
    if not script.is_file():
        return [f"`bash {path}`: no such script"]
    if args and not re.search(rf"^#\s+{re.escape(path)} {re.escape(args[0])}\b", script.read_text(), re.M):
        return [f"`bash {path} {args[0]}`: its usage names no such subcommand"]
    return []


def check_command(words: list[str]) -> list[str]:
    while words and (words[0] == "sudo" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        words = words[1:]  # sudo, VAR=value before the command
    if len(words) >= 2 and words[0] == "bash" and words[1].startswith("scripts/"):
        return check_script(words[1], words[2:])
    if len(words) >= 3 and PYTHON.match(Path(words[0]).name) and words[1] == "-m":
        program, args = words[2], words[3:]
    elif words:
        program, args = Path(words[0]).name, words[1:]
    else:
        return []
    if program == "lifeguard":
        return check_lifeguard(args)
    if program == "pytest":
        return check_pytest(args)
    if program == "pip":
        return check_pip(args)
    if program in extra_tools():
        return []
    return [f"cannot check `{' '.join(words)}`: give the block the info string `text` or put "
            f"{ILLUSTRATIVE} on the line before it"]


def block_problems(block: Block) -> list[str]:
    if not block.info:
        return [f"{block}: a fenced block without an info string (sh, console, text, python, ...)"]
    if block.info not in SHELL_INFO or block.illustrative:
        return []
    return [f"{block}: {problem}" for line in command_lines(block) for words in simple_commands(line)
            for problem in check_command(words)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", MARKDOWN, ids=_name)
def test_shell_examples_name_real_subcommands_and_options(path: Path) -> None:
    problems = [problem for block in fenced_blocks(path) for problem in block_problems(block)]
    assert not problems, "\n".join(problems)


def test_the_checks_see_the_examples() -> None:
    """The checks above are not vacuous: they find the README's commands, and refuse what is wrong."""
    checked = [block for block in fenced_blocks(README) if block.info in SHELL_INFO and not block.illustrative]
    commands = [words for block in checked for line in command_lines(block) for words in simple_commands(line)]
    assert ["python3", "-m", "pytest", "-q"] in commands  # .ci/run runs the quick start's test command
    assert sum(words[0] == "lifeguard" for words in commands) >= 5
    assert check_command(["lifeguard", "run", "--no-such-option"])
    assert check_command(["lifeguard", "no-such-subcommand"])
    assert not check_command(["lifeguard", "run", "path/to/script.py", "--its", "--own"])  # the script's own
    assert check_command(["pytest", "--lifeguard-no-such-option"])
    assert check_command(["python3", "-m", "pip", "install", ".[no-such-extra]"])
    assert check_command(["curl", "example"])
