"""A package's own test suite, found for ``lifeguard survey --tests``: installed with the package, from its source
distribution for the installed version (fetched with the target's pip), or a folder the user names; and its
tests, collected by the target's pytest and sampled evenly over the suite's modules when not all can run.

Everything runs in the target interpreter, bounded (lifeguard.capture.bounded.run_bounded): its pip, its pytest,
its view of the installed files. Nothing here runs a test.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import urllib.request
import zipfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lifeguard.capture.bounded import run_bounded
from lifeguard.errors import SurveyError
from lifeguard.interpreter import Interpreter

TEST_FOLDERS = ("tests", "test", "testing")
PYTEST_FILES = ("conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini")  # copied with the tests
# pytest without the folder it runs in on sys.path (python -m would put it first: a source tree's package)
PYTEST_MAIN = "import sys; del sys.path[0]; import pytest; sys.exit(pytest.main())"
FIND_TIMEOUT = 60.0
FETCH_TIMEOUT = 600.0  # pip resolving and downloading one source distribution
COLLECT_TIMEOUT = 300.0
FILES_AT_ONCE = 40  # test files collected at most; a suite of more is collected from that many
SDIST_SEARCH_DEPTH = 3  # test folders this deep in a source tree (src/package/tests)

T = TypeVar("T")

# Run in the target: the folders named like TEST_FOLDERS that hold test files, among the distribution's files, and
# the test files outside any such folder.
_FIND_INSTALLED = r"""
import importlib.metadata as md, json, sys
NAMES = @NAMES@
dist = md.distribution(sys.argv[1])
folders = set()
for path in dist.files or ():
    name = path.name
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        parts = path.parts
        for at, part in enumerate(parts[:-1]):
            if part in NAMES:
                folders.add("/".join(parts[:at + 1]))
                break
        else:  # a test module beside the package's own (bitarray/test_bitarray.py)
            folders.add("/".join(parts))
print(json.dumps({"version": dist.version, "base": str(dist.locate_file("")), "folders": sorted(folders)}))
""".replace("@NAMES@", repr(TEST_FOLDERS))


@dataclass(frozen=True)
class TestSuite:
    """Where a package's tests are: pytest runs in ``root`` (its rootdir) on ``paths``."""

    package: str
    version: str
    root: Path
    paths: tuple[Path, ...]
    origin: str  # "installed with the package", "source distribution NAME.tar.gz", "--tests-from DIR"
    source: Path | None = None  # the source tree the tests came from (its requirement files, its pyproject.toml)


def _outermost(folders: list[str]) -> list[str]:
    """The folders not inside another of them."""
    kept: list[str] = []
    for folder in sorted(folders, key=lambda f: (f.count("/"), f)):
        if not any(folder.startswith(outer + "/") for outer in kept):
            kept.append(folder)
    return sorted(kept)


def installed_tests(interpreter: Interpreter, package: str) -> TestSuite | None:
    """The tests installed with ``package`` (numpy's numpy/tests, numpy/core/tests, ...), or None."""
    ran = run_bounded([interpreter.executable, "-c", _FIND_INSTALLED, package], FIND_TIMEOUT)
    if ran.timed_out or ran.returncode != 0:
        raise SurveyError(f"{package}: its installed files could not be read in {interpreter.executable}: "
                          f"{(ran.stderr.strip().splitlines() or ['timed out'])[-1]}")
    found = json.loads(ran.stdout)
    folders = _outermost(list(found["folders"]))
    if not folders:
        return None
    base = Path(found["base"])
    return TestSuite(package, str(found["version"]), base, tuple(base / folder for folder in folders),
                     "installed with the package")


def given_tests(folder: Path, package: str, version: str) -> TestSuite:
    """``--tests-from DIR``: the tests in DIR (its test folders when it is a source tree, else DIR itself)."""
    if not folder.is_dir():
        raise SurveyError(f"--tests-from {folder}: not a folder")
    root = folder.resolve()
    paths = _test_folders(root) or [root]
    return TestSuite(package, version, root, tuple(paths), f"--tests-from {folder}", root)


def _test_folders(root: Path) -> list[Path]:
    """A source tree's test folders: tests/, test/ at its top, else the outermost ones a few levels down, else
    the test modules beside a package's own (bitarray/test_bitarray.py)."""
    top = [root / name for name in TEST_FOLDERS if _has_tests(root / name)]
    if top:
        return top
    found = []
    for depth in range(2, SDIST_SEARCH_DEPTH + 1):
        for candidate in sorted(root.glob("/".join(["*"] * depth))):
            if candidate.name in TEST_FOLDERS and candidate.is_dir() and _has_tests(candidate) \
                    and "build" not in candidate.relative_to(root).parts:
                found.append(candidate)
        if found:
            return found
    return sorted(path for pattern in ("*/test_*.py", "src/*/test_*.py") for path in root.glob(pattern))


def _has_tests(folder: Path) -> bool:
    return folder.is_dir() and (any(folder.rglob("test_*.py")) or any(folder.rglob("*_test.py")))


def sdist_tests(interpreter: Interpreter, package: str, version: str, folder: Path) -> TestSuite | None:
    """The tests of ``package``'s source distribution for ``version``, fetched with the target's pip into
    ``folder`` and unpacked there; None when it has no test folder."""
    archive = fetch_sdist(interpreter, package, version, folder)
    source = unpack(archive, folder / "source")
    found = _test_folders(source)
    if not found:
        return None
    root = _tests_alone(source, found, folder / "suite")
    return TestSuite(package, version, root, tuple(root / path.relative_to(source) for path in found),
                     f"source distribution {archive.name}", source)


def _tests_alone(source: Path, folders: list[Path], into: Path) -> Path:
    """A copy of the source tree's test folders and pytest's configuration, without the package's own source:
    the tests then import the installed package (its compiled extension), never the uncompiled one beside them."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    for folder in folders:
        if folder.is_file():  # a test module beside the package's own: alone, without the package
            (into / folder.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(folder, into / folder.relative_to(source))
        else:
            shutil.copytree(folder, into / folder.relative_to(source), symlinks=True)
    for name in PYTEST_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, into / name)
    return into


def fetch_sdist(interpreter: Interpreter, package: str, version: str, folder: Path) -> Path:
    """The source distribution's archive. pip downloads it; a package whose metadata pip cannot prepare here
    (a build backend it would have to build first) fails after the download, and the file is then fetched
    from the address pip found for it."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [interpreter.executable, "-m", "pip", "download", "-vv", "--no-binary", ":all:", "--no-deps",
            "--no-build-isolation", f"{package}=={version}", "-d", str(folder)]
    ran = run_bounded(argv, FETCH_TIMEOUT)
    archives = _archives(folder)
    if archives:
        return archives[0]
    if ran.timed_out:
        raise SurveyError(f"{package} {version}: pip download did not finish within {FETCH_TIMEOUT:g} s")
    stem = re.sub(r"[-_.]+", "[-_.]", re.escape(package.lower()).replace(r"\-", "-"))
    pattern = re.compile(rf"Added \S+ from (\S+/(?i:{stem})-{re.escape(version)}\.(?:tar\.gz|zip))\b")
    found = pattern.search(ran.stdout + ran.stderr)
    if found is None:
        last = (ran.stderr.strip().splitlines() or ran.stdout.strip().splitlines() or ["no output"])[-1]
        raise SurveyError(f"{package} {version}: no source distribution found by pip ({last})")
    url = found.group(1)
    target = folder / url.rsplit("/", 1)[1]
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        raise SurveyError(f"{package} {version}: the source distribution could not be fetched: {exc}") from None
    return target


def _archives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tar.bz2")))


def unpack(archive: Path, into: Path) -> Path:
    """The archive unpacked into ``into`` (files only, nothing outside it); its one top folder."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as packed:
            for member in packed.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    raise SurveyError(f"{archive.name}: a member outside the archive's folder: {member}")
            packed.extractall(into)
    else:
        with tarfile.open(archive) as packed:
            packed.extractall(into, filter="data")
    tops = [p for p in into.iterdir()]
    return tops[0] if len(tops) == 1 and tops[0].is_dir() else into


def test_files(suite: TestSuite) -> list[Path]:
    """The suite's test files (``test_*.py``, ``*_test.py``), in order."""
    found: set[Path] = set()
    for path in suite.paths:
        if path.is_file():
            found.add(path)
            continue
        found.update(path.rglob("test_*.py"))
        found.update(path.rglob("*_test.py"))
    return sorted(found)


def collect(interpreter: Interpreter, suite: TestSuite, work: Path, env: dict[str, str],
            timeout: float = COLLECT_TIMEOUT) -> tuple[list[str], int, int]:
    """The suite's test ids as the target's pytest collects them (relative to the suite's root), and from how
    many of how many test files: a suite of more than FILES_AT_ONCE files is collected from that many, spread
    evenly over its folders (numpy's 50,000 tests take longer to collect than a survey gives a package)."""
    files = test_files(suite)
    targets = list(suite.paths)
    if len(files) > FILES_AT_ONCE:
        targets = spread(files, FILES_AT_ONCE, lambda path: str(path.parent))
    argv = [*pytest_command(interpreter), "--collect-only", "-q", *pytest_base_args(suite),
            *(str(path.relative_to(suite.root)) for path in targets)]
    ran = run_bounded(argv, timeout, cwd=str(suite.root), env=env)
    if ran.timed_out:
        raise SurveyError(f"{suite.package}: collecting its tests took over {timeout:g} s")
    ids = [line.strip() for line in ran.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        tail = (ran.stdout.strip().splitlines() or ran.stderr.strip().splitlines() or ["no output"])[-3:]
        raise SurveyError(f"{suite.package}: pytest collected no test in {suite.origin}: {' / '.join(tail)}")
    return ids, (len(targets) if len(files) > FILES_AT_ONCE else len(files)), len(files)


def pytest_command(interpreter: Interpreter) -> list[str]:
    """The target's pytest, run in the suite's root (its node ids are relative to it) without the root on
    sys.path."""
    return [interpreter.executable, "-c", PYTEST_MAIN]


def pytest_base_args(suite: TestSuite) -> list[str]:
    """What every pytest session of a survey passes: the suite's rootdir, nothing written into it, none of the
    project's own addopts (they name plugins and options the target may not have: coverage, xdist), and its
    tests in their order."""
    return ["--rootdir", str(suite.root), "-p", "no:cacheprovider", "-o", "addopts=", "-p", "no:randomly",
            "-p", "no:benchmark"]  # pytest-benchmark makes .benchmarks/ where it runs: site-packages


def sample(ids: list[str], count: int) -> list[str]:
    """``count`` of ``ids``, spread evenly over the suite's modules, in the suite's order."""
    return spread(ids, count, lambda test: test.split("::", 1)[0])


def spread(items: list[T], count: int, group: Callable[[T], str]) -> list[T]:
    """``count`` of ``items``, spread evenly over their groups (round robin, each group's items evenly spaced),
    in their order."""
    if count >= len(items):
        return list(items)
    by_group: dict[str, list[T]] = defaultdict(list)
    for item in items:
        by_group[group(item)].append(item)
    share = dict.fromkeys(by_group, 0)
    left = count
    while left > 0:
        for name, members in by_group.items():
            if left and share[name] < len(members):
                share[name] += 1
                left -= 1
    chosen: set[int] = set()
    for name, members in by_group.items():
        n = share[name]
        chosen.update(id(members[int(i * len(members) / n)]) for i in range(n))
    return [item for item in items if id(item) in chosen]


INSTALL_TIMEOUT = 900.0
REQUIREMENT_FILES = ("requirements*test*.txt", "test*requirements*.txt", "requirements/test*.txt",
                     "tests/requirements*.txt", "test/requirements*.txt", "ci/requirements*test*.txt")
TEST_EXTRAS = ("test", "tests", "testing")  # optional dependencies and dependency groups of these names


def install_test_deps(interpreter: Interpreter, suite: TestSuite, work: Path) -> None:
    """pytest, what the suite's requirement files name, and its project's test extras and dependency groups,
    into the target (the user allowed it: --install-test-deps). What does not install is left out, and the
    suite is collected with the rest."""
    files = [path for pattern in REQUIREMENT_FILES for path in sorted((suite.source or suite.root).glob(pattern))]
    wanted = ["pytest", *_declared_test_requirements(suite.source or suite.root)]
    argv = [interpreter.executable, "-m", "pip", "install", "-q", *wanted]
    for path in files:
        argv += ["-r", str(path)]
    ran = run_bounded(argv, INSTALL_TIMEOUT, cwd=str(work))
    if ran.returncode != 0 and len(argv) > 6:  # something named does not install here: pytest alone
        ran = run_bounded(argv[:6], INSTALL_TIMEOUT, cwd=str(work))
    if ran.returncode != 0:
        raise SurveyError(f"{suite.package}: --install-test-deps failed: "
                          f"{(ran.stderr.strip().splitlines() or ['timed out'])[-1]}")


def _declared_test_requirements(source: Path) -> list[str]:
    """The requirements pyproject.toml declares for tests: optional dependencies and dependency groups named
    like TEST_EXTRAS (strings only; a group's include is left out)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: requirement files only
        return []
    try:
        data = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found: list[str] = []
    for table in (data.get("project", {}).get("optional-dependencies", {}), data.get("dependency-groups", {})):
        if isinstance(table, dict):
            for name in TEST_EXTRAS:
                found += [entry for entry in table.get(name, []) if isinstance(entry, str)]
    return found
