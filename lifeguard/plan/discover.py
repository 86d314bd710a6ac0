"""Find scenarios: scenario files, folders of them, plain scripts, ``-c CODE``, names.

A scenario file declares scenarios with ``@lifeguard.scenario``; any other ``.py``
file is a plain script, which expects a clean pass. Which is which is decided by
reading the file (ast), never by importing it: importing a plain script would
run the user's code inside the supervisor. Scenario files are imported too, but in
a discovery process (plan.declarations), one for all the files a command line names.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from lifeguard.build import bundled
from lifeguard.errors import ConfigurationError, UsageError
from lifeguard.model.run import RunKind
from lifeguard.model.scenario import DEFAULT_TIMEOUT, DEFAULT_VARIANT, Scenario
from lifeguard.plan.declarations import load_scenario_files

BUNDLED_DIR_NAME = "scenarios"


def bundled_scenarios_dir() -> Path:
    """``./scenarios`` when run from a checkout, else the bundled one (in the package, or beside it)."""
    here = Path.cwd() / BUNDLED_DIR_NAME
    if here.is_dir():
        return here
    return bundled(BUNDLED_DIR_NAME)


def declares_scenarios(path: Path, *, or_imports_lifeguard: bool = False) -> bool:
    """Does ``path`` use a ``@...scenario(...)`` decorator (or, with ``or_imports_lifeguard``, import
    lifeguard at all)? Read, not run."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise ConfigurationError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, nesting too deep for the parser
        raise ConfigurationError(f"{path}: cannot be parsed: {exc}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name == "scenario":
                    return True
        if or_imports_lifeguard and _imports_lifeguard(node):
            return True
    return False


def _imports_lifeguard(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "lifeguard" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "lifeguard"


def script_scenario(path: Path, timeout: float | None, argv: tuple[str, ...] = (), workdir: str = "") -> Scenario:
    """A plain script; ``argv`` is its sys.argv (the path as typed first), ``workdir`` its working
    directory ("" for its run folder)."""
    resolved = path.resolve()
    return Scenario(
        name=resolved.stem, function="", path=str(resolved), line=1, fixture=None,
        expect={DEFAULT_VARIANT: "passed"}, timeout=timeout or DEFAULT_TIMEOUT, repeat={"*": 1},
        description=f"plain script {resolved.name}", kind=RunKind.SCRIPT, argv=tuple(argv), workdir=workdir,
    )


def code_scenario(code: str, timeout: float | None, args: tuple[str, ...] = (), workdir: str = "") -> Scenario:
    try:
        compile(code, "<string>", "exec")
    except SyntaxError as exc:
        raise UsageError(f"-c: line {exc.lineno}: syntax error: {exc.msg}") from None
    return Scenario(
        name="code", function="", path="", line=0, fixture=None, expect={DEFAULT_VARIANT: "passed"},
        timeout=timeout or DEFAULT_TIMEOUT, repeat={"*": 1}, description="-c code", code=code, kind=RunKind.CODE,
        argv=("-c", *args), workdir=workdir,
    )


def module_scenario(module: str, timeout: float | None, args: tuple[str, ...] = (), workdir: str = "") -> Scenario:
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"-m {module!r}: not a module name")
    return Scenario(
        name=module, function="", path="", line=0, fixture=None, expect={DEFAULT_VARIANT: "passed"},
        timeout=timeout or DEFAULT_TIMEOUT, repeat={"*": 1}, description=f"-m {module}", kind=RunKind.MODULE,
        argv=("-m", *args), module=module, workdir=workdir,
    )


def command_scenario(argv: tuple[str, ...], timeout: float | None, workdir: str = "") -> Scenario:
    """Any executable: a shell script that starts Python, a console script such as ``pytest``."""
    if not argv:
        raise UsageError("--: no command after it (lifeguard run [OPTIONS] -- COMMAND [ARGS...])")
    program = argv[0]
    found = program if os.sep in program else shutil.which(program)
    if found is None or not os.path.isfile(os.path.join(workdir, found)):
        raise UsageError(f"-- {program}: command not found")
    if not os.access(os.path.join(workdir, found), os.X_OK):
        raise UsageError(f"-- {program}: not executable (run it through its interpreter: -- sh {program})")
    return Scenario(
        name=os.path.basename(program), function="", path=found, line=0, fixture=None,
        expect={DEFAULT_VARIANT: "passed"}, timeout=timeout or DEFAULT_TIMEOUT, repeat={"*": 1},
        description=f"command {shlex.join(argv)}", kind=RunKind.COMMAND, argv=tuple(argv), workdir=workdir,
    )


@dataclass(frozen=True)
class PlainTarget:
    """A plain target as the command line gives it, Python's way: ``script.py ARGS``, ``-m MODULE ARGS``,
    ``-c CODE ARGS`` or ``-- COMMAND ARGS`` (everything after the target is the target's)."""

    kind: RunKind  # one of PLAIN_KINDS
    value: str  # the script as typed, the module, the code; a command's program
    args: tuple[str, ...] = ()

    def scenario(self, timeout: float | None, workdir: str) -> Scenario:
        if self.kind is RunKind.SCRIPT:
            path = Path(workdir, self.value) if workdir else Path(self.value)
            return script_scenario(path, timeout, (self.value, *self.args), workdir)
        if self.kind is RunKind.MODULE:
            return module_scenario(self.value, timeout, self.args, workdir)
        if self.kind is RunKind.CODE:
            return code_scenario(self.value, timeout, self.args, workdir)
        return command_scenario((self.value, *self.args), timeout, workdir)


def _file_kind(path: Path) -> str:
    import stat

    mode = path.stat().st_mode
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def is_plain_script(target: str) -> bool:
    """A target that is a Python file that declares no scenario and does not import lifeguard (read, not
    run): a plain script, which takes every word after it as its arguments. A file that imports lifeguard is
    a scenario file, and one that declares none an error (discovery says so), never a silent pass."""
    path = Path(target)
    if "::" in target or path.suffix != ".py" or not path.is_file():
        return False
    try:
        return not declares_scenarios(path, or_imports_lifeguard=True)
    except ConfigurationError:
        # Python cannot parse it: a plain script unless it names lifeguard (a scenario file, whose error
        # discover() says). Run as python runs it, which reports its own SyntaxError and exits 1.
        try:
            return b"lifeguard" not in path.read_bytes()
        except OSError:
            return False


def load_scenario_file(path: Path) -> list[Scenario]:
    """The scenarios one scenario file declares, loaded by a discovery process (never here)."""
    resolved = path.resolve()
    return load_scenario_files([resolved])[resolved]


def scenario_files(folder: Path) -> list[Path]:
    """The scenario files of a folder, sorted (read, not run): those with a ``@...scenario`` decorator whose
    names do not start with ``_`` (a helper module that only imports lifeguard is not one)."""
    return [path.resolve() for path in sorted(folder.glob("*.py"))
            if not path.name.startswith("_") and declares_scenarios(path)]


@dataclass(frozen=True)
class _Target:
    """One command-line target, resolved without running anything: the scenario files it loads, or a plain
    script, or the name of a bundled scenario."""

    text: str  # as given
    files: tuple[Path, ...] = ()
    name: str = ""  # FILE.py::NAME: only that scenario
    script: Scenario | None = None
    bundled: bool = False

    @classmethod
    def of(cls, target: str, timeout: float | None) -> _Target:
        file_part, _, name = target.partition("::")
        path = Path(file_part)
        if path.exists():
            if not (path.is_file() or path.is_dir()):  # a FIFO would block the read, a device never end it
                raise UsageError(f"{target}: not a regular file or a folder ({_file_kind(path)}); name a Python "
                                 "file, a folder of scenario files or a bundled scenario")
            if path.is_file() and path.suffix != ".py":
                raise UsageError(f"{target}: not a Python file (an executable runs as: lifeguard run -- {target})")
            if path.is_dir():
                return cls(target, tuple(scenario_files(path)), name)
            if declares_scenarios(path, or_imports_lifeguard=True):
                return cls(target, (path.resolve(),), name)
            return cls(target, name=name, script=script_scenario(path, timeout))
        if file_part.endswith(".py") or os.sep in file_part:
            raise UsageError(f"{target}: no such file or folder")
        return cls(target, bundled=True)

    def pick(self, loaded: dict[Path, list[Scenario]], bundled: list[Scenario]) -> list[Scenario]:
        if self.bundled:
            named = [s for s in bundled if s.name == self.text]
            if not named:
                known = ", ".join(sorted(s.name for s in bundled)) or "none"
                raise UsageError(f"unknown scenario {self.text!r} (bundled scenarios: {known})")
            return named
        items = [self.script] if self.script else [s for path in self.files for s in loaded[path]]
        if self.name:
            items = [s for s in items if s.name == self.name]
            if not items:
                raise UsageError(f"{self.text}: no scenario named {self.name!r} in {self.text.partition('::')[0]}")
        return items


def discover(targets: list[str], *, code: str | None = None, timeout: float | None = None,
             plain: PlainTarget | None = None, workdir: str = "") -> list[Scenario]:
    """Resolve command-line targets: files, folders, ``file.py::name`` or bundled names, then the plain
    target that ends the command line, if any (run in ``workdir``). Every scenario file they name is loaded
    by one discovery process, after the checks that need none (files that do not exist, syntax errors)."""
    if code is not None:
        if targets:
            raise UsageError("-c CODE takes no other targets")
        return [code_scenario(code, timeout, workdir=workdir)]
    if plain is not None:
        return [*(discover(targets, timeout=timeout) if targets else []), plain.scenario(timeout, workdir)]
    if not targets:
        folder = bundled_scenarios_dir()
        if not folder.is_dir():
            raise UsageError(f"no targets given and no bundled scenarios folder at {folder}")
        files = scenario_files(folder)
        loaded = load_scenario_files(files)
        return [s for path in files for s in loaded[path]]
    resolved = [_Target.of(target, timeout) for target in targets]
    folder = bundled_scenarios_dir()
    bundled_files = scenario_files(folder) if any(t.bundled for t in resolved) and folder.is_dir() else []
    files = [path for target in resolved for path in target.files]
    loaded = load_scenario_files(list(dict.fromkeys([*files, *bundled_files])))
    bundled = [s for path in bundled_files for s in loaded[path]]
    return [s for target in resolved for s in target.pick(loaded, bundled)]


_TOKEN = re.compile(r"\s*(\(|\)|and\b|or\b|not\b|[^\s()]+)")
K_NESTING = 100  # `not`s and parentheses inside each other: deeper is no expression anyone means


def select(scenarios: list[Scenario], expr: str) -> list[Scenario]:
    """Keep scenarios matching a pytest-style ``-k`` expression (substrings with and/or/not)."""
    tokens = [t for t in _TOKEN.findall(expr) if t.strip()]
    if not tokens:
        raise UsageError("-k: empty expression")
    shown = expr if len(expr) <= 80 else expr[:77] + "..."
    pos = depth = 0

    def parse_or(name: str) -> bool:
        nonlocal pos
        value = parse_and(name)
        while pos < len(tokens) and tokens[pos] == "or":
            pos += 1
            value = parse_and(name) or value
        return value

    def parse_and(name: str) -> bool:
        nonlocal pos
        value = parse_not(name)
        while pos < len(tokens) and tokens[pos] == "and":
            pos += 1
            value = parse_not(name) and value
        return value

    def parse_not(name: str) -> bool:
        nonlocal pos, depth
        if pos < len(tokens) and tokens[pos] in ("not", "("):
            depth += 1
            if depth > K_NESTING:
                raise UsageError(f"-k {shown!r}: nested more than {K_NESTING} deep")
            opened = tokens[pos] == "("
            pos += 1
            value = parse_or(name) if opened else not parse_not(name)
            if opened:
                if pos >= len(tokens) or tokens[pos] != ")":
                    raise UsageError(f"-k {shown!r}: missing ')'")
                pos += 1
            depth -= 1
            return value
        if pos >= len(tokens) or tokens[pos] in ("and", "or", ")"):
            raise UsageError(f"-k {shown!r}: expected a word at position {pos + 1}")
        word = tokens[pos]
        pos += 1
        return word.lower() in name.lower()

    kept = []
    for item in scenarios:
        pos = 0
        haystack = " ".join([item.name, item.fixture or "", Path(item.path).stem if item.path else "", *item.tags])
        if parse_or(haystack):
            kept.append(item)
        if pos != len(tokens):
            raise UsageError(f"-k {shown!r}: unexpected {tokens[pos]!r}")
    return kept
