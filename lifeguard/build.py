"""Compile a native fixture into an importable extension module, once per variant and ABI.

A fixture is a folder ``fixtures_native/<name>/``; every C/C++ source directly in
it is compiled into one extension module called ``<name>``. The variant picks the
code path through ``-DLIFEGUARD_FIXED=0|1``. Builds are cached under
``<cache>/build/<name>-<variant>-<hash>/`` where the hash covers the sources,
the interpreter ABI, the compiler and the flags, so a change to any of them
rebuilds, and many processes building at once (``-j``, xdist) share one result.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lifeguard.cache import CACHE_ENV, cache_folder
from lifeguard.errors import BuildCacheError, BuildError
from lifeguard.interpreter import Interpreter


def cache_dir() -> Path:
    """The cache folder (lifeguard.cache): ``$LIFEGUARD_CACHE``, else ``$XDG_CACHE_HOME/lifeguard``, else
    ``~/.cache/lifeguard``."""
    return Path(cache_folder())


def writable_cache() -> Path:
    """The cache folder, made and proven writable, or BuildCacheError in one line naming it and the remedy.

    Needed where something is written there: a fixture build, the children's path link.
    """
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=folder, prefix=".lifeguard-write-test-").close()  # noqa: SIM115
    except OSError as exc:
        raise BuildCacheError(unwritable_cache(folder, exc)) from None
    return folder


def unwritable_cache(folder: Path, exc: OSError) -> str:
    """One line: which cache folder cannot be written, why, and how to choose another."""
    why = "a file stands on its path" if isinstance(exc, (FileExistsError, NotADirectoryError)) \
        else (exc.strerror or str(exc))
    source = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the default"
    return (f"the build cache {folder} ({source}) cannot be written: {why}; "
            f"set {CACHE_ENV} to a folder you can write (e.g. {CACHE_ENV}=/tmp/lifeguard-cache)")


COMPILE_TIMEOUT = 300.0
C_SUFFIXES = (".c",)
CXX_SUFFIXES = (".cc", ".cpp", ".cxx")
# -O0 -g and never stripped: the backtraces lifeguard shows must name real lines.
COMMON_FLAGS = ("-g", "-O0", "-fPIC", "-pthread", "-Wall")
CXX_FLAGS = ("-std=c++17",)
VARIANT_DEFINES = {"buggy": "-DLIFEGUARD_FIXED=0", "fixed": "-DLIFEGUARD_FIXED=1"}


def bundled(folder: str) -> Path:
    """A folder lifeguard ships (``scenarios``, ``fixtures_native``): inside the installed package
    (a wheel maps them to ``lifeguard/<folder>``, see pyproject.toml), else beside it in a checkout."""
    package = Path(__file__).resolve().parent
    installed = package / folder
    return installed if installed.is_dir() else package.parent / folder


def fixtures_root() -> Path:
    """``$LIFEGUARD_FIXTURES`` or the bundled ``fixtures_native/``."""
    explicit = os.environ.get("LIFEGUARD_FIXTURES")
    return Path(explicit) if explicit else bundled("fixtures_native")


def available_fixtures() -> list[str]:
    root = fixtures_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _sources(p))


@dataclass(frozen=True)
class BuiltFixture:
    name: str
    variant: str
    directory: Path  # put this on sys.path, then `import <name>`
    module_path: Path
    cached: bool  # True when an earlier build was reused


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in C_SUFFIXES + CXX_SUFFIXES and p.is_file())


def _compilers() -> tuple[str, str]:
    return os.environ.get("CC", "gcc"), os.environ.get("CXX", "g++")


def _build_key(folder: Path, variant: str, interp: Interpreter) -> str:
    import hashlib  # only where a fixture is built: a session without one does without OpenSSL

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    cc, cxx = _compilers()
    for part in (interp.executable, interp.soabi, interp.include, interp.ext_suffix, cc, cxx,
                 " ".join(COMMON_FLAGS + CXX_FLAGS), VARIANT_DEFINES[variant]):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _run_compiler(argv: list[str], cwd: Path) -> None:
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise BuildError(f"compiler not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"compiler timed out after {COMPILE_TIMEOUT:.0f} s: {shlex.join(argv)}") from None
    if proc.returncode != 0:
        raise BuildError(f"{shlex.join(argv)}\nexit {proc.returncode}\n{proc.stderr}{proc.stdout}".rstrip())


def find_fixture(name: str, near: Path | None = None) -> Path:
    """The folder of fixture ``name``: a ``fixtures_native/<name>`` found walking up
    from ``near`` (a scenario file's folder), else the project's own."""
    candidates = []
    if near is not None:
        for folder in (near, *near.parents):
            candidates.append(folder / "fixtures_native" / name)
    candidates.append(fixtures_root() / name)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    known = ", ".join(available_fixtures()) or "none"
    raise BuildError(f"unknown fixture {name!r} (no fixtures_native/{name}/ found; bundled: {known})")


def build_fixture(name: str, variant: str, interp: Interpreter, *, near: Path | None = None,
                  force: bool = False, on_compile: Callable[[str, str], None] | None = None) -> BuiltFixture:
    """Build (or reuse) fixture ``name`` in ``variant`` for ``interp``; ``on_compile(name, variant)`` is
    told before the compiler starts (a build takes seconds: the terminal says what it waits for)."""
    if variant not in VARIANT_DEFINES:
        raise BuildError(f"fixture {name}: unknown variant {variant!r}")
    folder = find_fixture(name, near)
    sources = _sources(folder)
    if not sources:
        raise BuildError(f"fixture {name}: no C/C++ sources in {folder}")
    key = _build_key(folder, variant, interp)
    out_dir = cache_dir() / "build" / f"{name}-{variant}-{key}"
    module_path = out_dir / f"{name}{interp.ext_suffix}"
    if module_path.exists() and not force:
        return BuiltFixture(name, variant, out_dir, module_path, cached=True)
    lock_path = cache_dir() / "build" / f"{name}-{variant}-{key}.lock"
    try:
        writable_cache()
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(lock_path, "w")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise BuildCacheError(unwritable_cache(lock_path.parent, exc)) from None
    with lock:
        # Another process may be building the same thing: wait for it, then reuse.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if module_path.exists() and not force:
            return BuiltFixture(name, variant, out_dir, module_path, cached=True)
        if on_compile is not None:
            on_compile(name, variant)
        _compile(sources, variant, interp, out_dir, module_path)
    return BuiltFixture(name, variant, out_dir, module_path, cached=False)


def _compile(sources: list[Path], variant: str, interp: Interpreter, out_dir: Path, module_path: Path) -> None:
    cc, cxx = _compilers()
    staging = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        objects = []
        for src in sources:
            is_cxx = src.suffix in CXX_SUFFIXES
            obj = staging / (src.name + ".o")
            argv = [cxx if is_cxx else cc, *COMMON_FLAGS, *(CXX_FLAGS if is_cxx else ()),
                    f"-I{interp.include}", VARIANT_DEFINES[variant], "-c", str(src), "-o", str(obj)]
            _run_compiler(argv, staging)
            objects.append(str(obj))
        linker = cxx if any(s.suffix in CXX_SUFFIXES for s in sources) else cc
        _run_compiler([linker, "-shared", "-pthread", *objects, "-o", str(staging / module_path.name)], staging)
        for object_file in objects:
            os.unlink(object_file)
        if out_dir.exists():  # --force: replace the old build whole
            shutil.rmtree(out_dir)
        os.rename(staging, out_dir)  # atomic: readers see a complete build or none
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
