"""Scenario definitions: the ``@lifeguard.scenario`` decorator and its data.

This module is imported inside the child too (scenario files import lifeguard),
so it stays free of heavy imports and of anything supervisor-specific.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifeguard.errors import ScenarioDefinitionError
from lifeguard.model.outcomes import Expectation
from lifeguard.model.run import PLAIN_KINDS, RunKind
from lifeguard.model.validate import positive_count, positive_seconds

VARIANTS = ("buggy", "fixed")
DEFAULT_VARIANT = "default"
DEFAULT_TIMEOUT = 30.0
# What a plain target is: a script, ``-c`` code, ``-m`` module or any command, run as Python's own command
# line (or the shell) would run it; everything else is a scenario declared with ``@scenario``.

# Per-variant expectation: "crashed@exit", or by Python version
# {"<3.12": "crashed@exit", ">=3.12": "hung@exit"} (first matching key wins; "*" matches all).
ExpectSpec = str | Mapping[str, str]

_VERSION_KEY = re.compile(r"^(<=|>=|==|<|>)?\s*(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Scenario:
    """A named program run for one process lifetime, with an expectation per variant."""

    name: str
    function: str  # the body's name inside its module
    path: str  # the scenario file ("" for -c code)
    line: int
    fixture: str | None
    expect: Mapping[str, ExpectSpec]
    timeout: float
    repeat: Mapping[str, int]
    description: str = ""
    code: str | None = None  # source for `-c CODE` and plain scripts run as a whole
    kind: RunKind = RunKind.FUNCTION  # or one of PLAIN_KINDS: a script, -c code, -m module, -- command
    tags: tuple[str, ...] = field(default_factory=tuple)
    # The body needs no pristine interpreter: runs may be forked from a warm server.
    fork_server: bool = False
    # How to replay one run, with "{seed}" for its seed: None derives a `lifeguard run`
    # command from the scenario's file and name; "" when there is no such command.
    replay: str | None = None
    # Where the search for fixtures_native/<fixture>/ starts: "" for the scenario file's
    # folder. A generated scenario file (the pytest plugin's) points at the test's folder.
    fixture_near: str = ""
    # Plain targets: the program's sys.argv as Python would give it (a command: its whole argv), the
    # module of ``-m``, and the working directory ("": the run's own folder).
    argv: tuple[str, ...] = ()
    module: str = ""
    workdir: str = ""
    # The deadline counts from the start of the body (a pytest test's: its interpreter's start-up and the
    # import of pytest are not the test's); start-up has a bound of its own (run.supervise.STARTUP_TIMEOUT).
    deadline_from_body: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kind, RunKind):  # its value as text (a record, a test): the one spelling
            object.__setattr__(self, "kind", RunKind(self.kind))

    @property
    def is_plain(self) -> bool:
        return self.kind in PLAIN_KINDS

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.expect)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else "<code>"

    def expectation(self, variant: str, python_version: tuple[int, int]) -> Expectation:
        return resolve_expectation(self.expect[variant], python_version, self.where)

    @property
    def fixture_search_start(self) -> Path | None:
        """The folder from which fixtures_native/<fixture>/ is searched for, walking up."""
        if self.fixture_near:
            return Path(self.fixture_near)
        return Path(self.path).parent if self.path else None

    def repeat_for(self, variant: str) -> int:
        return self.repeat.get(variant, self.repeat.get("*", 1))


def _version_matches(key: str, version: tuple[int, int], where: str) -> bool:
    if key.strip() == "*":
        return True
    match = _VERSION_KEY.match(key.strip())
    if not match:
        raise ScenarioDefinitionError(
            f"{where}: bad Python version key {key!r} (use e.g. '<3.12', '>=3.12', '3.13' or '*')"
        )
    op, major, minor = match.group(1) or "==", int(match.group(2)), int(match.group(3))
    wanted = (major, minor)
    return {
        "<": version < wanted,
        "<=": version <= wanted,
        ">": version > wanted,
        ">=": version >= wanted,
        "==": version == wanted,
    }[op]


def resolve_expectation(spec: ExpectSpec, version: tuple[int, int], where: str) -> Expectation:
    """The expectation that applies under Python ``version``."""
    if isinstance(spec, str):
        text = spec
    else:
        for key, value in spec.items():
            if _version_matches(key, version, where):
                text = value
                break
        else:
            shown = ".".join(map(str, version))
            raise ScenarioDefinitionError(f"{where}: no expectation covers Python {shown}")
    try:
        return Expectation.parse(text)
    except ValueError as exc:
        raise ScenarioDefinitionError(f"{where}: {exc}") from None


def _validate_expect(expect: Any, where: str) -> dict[str, ExpectSpec]:
    if not isinstance(expect, Mapping) or not expect:
        raise ScenarioDefinitionError(
            f"{where}: expect must be a non-empty dict of variant -> outcome, "
            "e.g. {'buggy': 'crashed@exit', 'fixed': 'passed'}"
        )
    checked: dict[str, ExpectSpec] = {}
    for variant, spec in expect.items():
        if variant not in (*VARIANTS, DEFAULT_VARIANT):
            raise ScenarioDefinitionError(
                f"{where}: unknown variant {variant!r} (choose from buggy, fixed, default)"
            )
        if isinstance(spec, str):
            resolve_expectation(spec, (3, 0), where)  # syntax check
        elif isinstance(spec, Mapping) and spec:
            for key, text in spec.items():
                _version_matches(str(key), (3, 0), where)
                if not isinstance(text, str):
                    raise ScenarioDefinitionError(f"{where}: expectation for {key!r} must be a string")
                resolve_expectation(text, (3, 0), where)
        else:
            raise ScenarioDefinitionError(
                f"{where}: expectation of {variant!r} must be a string or a dict of version -> string"
            )
        checked[variant] = spec
    return checked


def _validate_repeat(repeat: Any, variants: tuple[str, ...], where: str) -> dict[str, int]:
    if isinstance(repeat, bool) or not isinstance(repeat, (int, Mapping)):
        raise ScenarioDefinitionError(f"{where}: repeat must be a positive int or a dict of variant -> int")
    values = {"*": repeat} if isinstance(repeat, int) else dict(repeat)
    for key, count in values.items():
        if key != "*" and key not in variants:
            raise ScenarioDefinitionError(f"{where}: repeat names unknown variant {key!r}")
        if not isinstance(count, int):
            raise ScenarioDefinitionError(f"{where}: repeat must be a positive int, got {count!r}")
        try:
            positive_count(count, f"{where}: repeat")
        except ValueError as exc:
            raise ScenarioDefinitionError(str(exc)) from None
    return values


_FOLDER_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
EVIDENCE_NAME_LIMIT = 80


def evidence_name(name: str) -> str:
    """A scenario's name as its runs' evidence folders spell it (``runs/<this>-<variant>-<n>/``)."""
    return _FOLDER_UNSAFE.sub("_", name)[:EVIDENCE_NAME_LIMIT]


def check_unique_names(scenarios: Sequence[Scenario]) -> None:
    """Refuse two scenarios of one selection whose runs would share evidence folders and results: the same
    name in two files, or names that become one folder name (``case 1`` and ``case_1``)."""
    seen: dict[str, Scenario] = {}
    for item in scenarios:
        key = evidence_name(item.name)
        other = seen.setdefault(key, item)
        if other is item:
            continue
        same = "the same name" if other.name == item.name else f"names that share the folder name {key!r}"
        if other == item:
            raise ScenarioDefinitionError(f"scenario {item.name!r} ({item.where}) is selected twice: name it once")
        raise ScenarioDefinitionError(
            f"scenarios {other.name!r} ({other.where}) and {item.name!r} ({item.where}) have {same}: their "
            "runs would share one evidence folder; rename one (@lifeguard.scenario(name=...))")


def unique_selection(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """``scenarios`` with repeats of one definition dropped (a file and a name that selects it again),
    refused by check_unique_names when two definitions collide."""
    kept: list[Scenario] = []
    for item in scenarios:
        if item not in kept:
            kept.append(item)
    check_unique_names(kept)
    return kept


def body_kind(func: Callable[..., Any]) -> str | None:
    """"an async def" or "a generator function" for a body that calling does not run, else None."""
    import inspect

    return ("an async def" if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)
            else "a generator function" if inspect.isgeneratorfunction(func) else None)


def _check_body(kind: str | None, name: str, where: str) -> None:
    """A body is called once and must do its work in that call: calling an ``async def`` or a generator
    function only makes a coroutine or a generator, so the run would pass without running the body."""
    if kind is not None:
        raise ScenarioDefinitionError(
            f"{where}: scenario body {name} is {kind}: calling it would not run it, and the run would pass "
            "without doing anything; make it a plain def (an async body: def that calls asyncio.run(...))")


# Scenarios declared while a scenario file is being imported, in order.
_registry: list[Scenario] = []

# The keyword arguments of @scenario, as define() accepts them from data.
OPTIONS = ("expect", "timeout", "repeat", "name", "tags", "fork_server")


def scenario(
    fixture: str | None = None,
    *,
    expect: Mapping[str, ExpectSpec] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    repeat: int | Mapping[str, int] = 1,
    name: str | None = None,
    tags: tuple[str, ...] = (),
    fork_server: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a scenario whose body (the decorated function) runs in a fresh child.

    fixture: a folder of ``fixtures_native/``; the body then receives the built
        extension module of the run's variant as its only argument.
    expect: variant -> expected outcome ("passed", "crashed@exit", "hung", ...),
        or variant -> {python version key -> outcome} where behaviour differs
        by version. Without a fixture the only variant is ``default``.
    timeout: seconds before the run counts as hung.
    repeat: runs per variant by default (an int, or a dict per variant).
    fork_server: the body needs no pristine interpreter, so under ``--mode auto``
        its runs may be forked from a warm server (exit-phase scenarios still get
        a fresh interpreter).
    """
    options = {"expect": expect, "timeout": timeout, "repeat": repeat, "name": name, "tags": tags,
               "fork_server": fork_server}

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        code = getattr(func, "__code__", None)
        _registry.append(define(fixture, options, function=func.__name__, path=code.co_filename if code else "",
                                line=code.co_firstlineno if code else 0, doc=func.__doc__, body=body_kind(func)))
        return func

    return decorate


def define(fixture: Any, options: Mapping[str, Any], *, function: str, path: str, line: int,
           doc: str | None, body: str | None = None) -> Scenario:
    """The scenario that ``@scenario(fixture, **options)`` on ``function`` (at ``path:line``; ``body``: its
    body_kind) declares, or a ScenarioDefinitionError naming that line. Works on data alone: the supervisor
    checks here what the discovery process recorded (child.discovery), with the messages the decorator always
    gave."""
    import inspect  # only where scenarios are declared: the CLI's start-up does without it

    where = f"{path}:{line}"
    for key in options:
        if key not in OPTIONS:
            raise ScenarioDefinitionError(f"{where}: scenario() got an unexpected keyword argument {key!r}")
    _check_body(body, function, where)
    wanted = options.get("expect")
    timeout = options.get("timeout", DEFAULT_TIMEOUT)
    name, tags = options.get("name"), options.get("tags", ())
    if wanted is None:
        wanted = {"buggy": "passed", "fixed": "passed"} if fixture else {DEFAULT_VARIANT: "passed"}
    checked = _validate_expect(wanted, where)
    if fixture is None and set(checked) != {DEFAULT_VARIANT}:
        raise ScenarioDefinitionError(f"{where}: variants buggy/fixed need a fixture=")
    if fixture is not None and DEFAULT_VARIANT in checked:
        raise ScenarioDefinitionError(f"{where}: a fixture scenario expects per variant (buggy/fixed)")
    if fixture is not None and not isinstance(fixture, str):
        raise ScenarioDefinitionError(f"{where}: fixture must be the name of a folder of fixtures_native/, "
                                      f"got {fixture!r}")
    if not isinstance(timeout, (int, float)):
        raise ScenarioDefinitionError(f"{where}: timeout must be a positive number, got {timeout!r}")
    try:
        positive_seconds(timeout, f"{where}: timeout")
    except ValueError as exc:
        raise ScenarioDefinitionError(str(exc)) from None
    repeats = _validate_repeat(options.get("repeat", 1), tuple(checked), where)
    if name is not None and not isinstance(name, str):
        raise ScenarioDefinitionError(f"{where}: name must be a string, got {name!r}")
    if not isinstance(tags, (list, tuple, set, frozenset)) or not all(isinstance(tag, str) for tag in tags):
        raise ScenarioDefinitionError(f"{where}: tags must be a tuple of strings, got {tags!r}")
    return Scenario(
        name=name or function,
        function=function,
        path=path,
        line=line,
        fixture=fixture,
        expect=checked,
        timeout=float(timeout),
        repeat=repeats,
        description=inspect.cleandoc(doc or "").split("\n\n")[0],
        tags=tuple(tags),
        fork_server=bool(options.get("fork_server", False)),
    )


def take_registered() -> list[Scenario]:
    """Hand over (and forget) the scenarios declared since the last call."""
    taken = list(_registry)
    _registry.clear()
    return taken
