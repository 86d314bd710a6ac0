"""How a child is started: its command line, environment, spec and files.

Shared by fresh children (supervise), forked ones (forkserver) and replays under
gdb (native), so that all three start the same bootstrap the same way.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from lifeguard.cache import cache_folder
from lifeguard.child import protocol
from lifeguard.child.cores import pattern_is_local
from lifeguard.child.protocol import BOOT_SCRIPT, EVENTS_FILE
from lifeguard.child.unpatched import pyc_header
from lifeguard.model.run import BacktraceMethod, RunKind, RunSpec, StartMode
from lifeguard.run import childpath
from lifeguard.run.boot import boot_code, child_bundle

# The signal the child's faulthandler listens on for a dump of every thread.


def child_path_dir() -> Path:
    """A folder holding only a link to this package, for the child's sys.path (lifeguard.run.childpath)."""
    return Path(childpath.child_path_folder())


# Asks every Python process of a run's tree for a faulthandler dump (sent to the child in the spec).
DUMP_SIGNAL = signal.SIGUSR2

PRECOMPILE_TIMEOUT = 60.0


def child_side_modules() -> list[Path]:
    """The modules a child may import: the package's ``__init__`` and all of ``child/`` (a list of names here
    fell behind the bootstrap's imports: a module without bytecode is compiled in every child, and compile()
    leaves the interpreter its ast types to free at exit, a millisecond of every run's finalization)."""
    package = Path(__file__).resolve().parents[1]
    return [package / "__init__.py", *sorted((package / "child").glob("*.py"))]


def _bytecode_is_fresh(source: Path) -> bool:
    """Is this interpreter's cached bytecode of ``source`` up to date (magic, source mtime and size)?"""
    import importlib.util

    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as f:
            return f.read(16) == pyc_header(str(source))
    except (OSError, NotImplementedError):
        return False


@functools.cache
def precompile_child_side(executable: str, version: tuple[int, ...] = ()) -> None:
    """Byte-compile the modules every child imports, for the child's interpreter, once.

    Without cached bytecode (PYTHONDONTWRITEBYTECODE, a fresh checkout, another
    Python version) every run would compile them again: milliseconds per run.
    For a child of this interpreter's version, fresh bytecode is checked here (no process at all);
    another version compiles its own. Best effort: a read-only install just goes without.
    """
    files = [*child_side_modules(), site_hook_dir() / protocol.SITE_HOOK_FILE]  # the hook: every plain run's start
    if tuple(version[:2]) == tuple(sys.version_info[:2]) and sys.implementation.name == "cpython":
        import py_compile

        for source in files:
            if not _bytecode_is_fresh(source):
                try:
                    py_compile.compile(str(source), doraise=True)
                except (OSError, py_compile.PyCompileError):
                    pass
        return
    try:
        subprocess.run([executable, "-m", "py_compile", *map(str, files)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PRECOMPILE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def file_bytecode(spec: RunSpec) -> str | None:
    """A script's or a scenario file's code compiled for the child's interpreter, as a .pyc in lifeguard's cache
    (plain.script_code says why the child does not compile it; a scenario file's own __pycache__ may not be
    written: PYTHONDONTWRITEBYTECODE, a read-only folder); None for other targets, or when it cannot be compiled
    here (the child compiles or imports it then, and reports a syntax error as Python would)."""
    if spec.kind not in (RunKind.SCRIPT, RunKind.FUNCTION) or not spec.path:
        return None
    try:
        stat = os.stat(spec.path)
    except OSError:
        return None
    return _compiled_script(spec.interpreter.executable, tuple(spec.interpreter.version), spec.path,
                            stat.st_mtime_ns, stat.st_size)


@functools.cache
def _compiled_script(executable: str, version: tuple[int, ...], path: str, mtime_ns: int, size: int) -> str | None:
    import hashlib

    key = hashlib.sha256(f"{executable}\0{path}".encode(errors="surrogateescape")).hexdigest()[:32]
    target = Path(cache_folder()) / "scripts" / f"{key}.pyc"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if tuple(version[:2]) == tuple(sys.version_info[:2]) and sys.implementation.name == "cpython":
        import py_compile

        try:
            py_compile.compile(path, cfile=str(target), dfile=path, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (OSError, py_compile.PyCompileError):
            return None
        return str(target)
    code = ("import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], dfile=sys.argv[1], "
            "doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)")
    try:
        done = subprocess.run([executable, "-I", "-c", code, path, str(target)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PRECOMPILE_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(target) if done.returncode == 0 else None


def boot_script(path_dir: Path) -> Path:
    """The child bootstrap as a script file, for tools that pass arguments through a
    shell (gdb's ``run``): no quoting to get wrong, unlike ``-c CODE``."""
    script = path_dir / BOOT_SCRIPT
    if not script.exists():
        tmp = path_dir / f".{BOOT_SCRIPT}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(f"{protocol.BOOTSTRAP}\n\nbootstrap.main()\n")
        os.replace(tmp, script)
    return script


def site_hook_dir() -> Path:
    """The folder put first on a plain run's PYTHONPATH: only a sitecustomize.py that attaches each Python
    process of the run's tree (child.attach; lifeguard.run.childpath)."""
    return Path(childpath.site_hook_folder())


def no_inherited_cores() -> None:
    """Children start with core dumps off (a soft RLIMIT_CORE of 0, whatever the user's shell allows): a
    plain target works in the user's folder, where the kernel must not write a core. Python processes of a
    run turn them on where a core lands in the run's folder (child.cores); the hard limit is untouched."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if soft != 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


def wants_cores(spec: RunSpec) -> bool:
    """Do the run's Python processes turn core dumps on where a core lands in the run's folder (child.cores)?"""
    return spec.cores and spec.backtrace is BacktraceMethod.CORE


def raise_core_limit(spec: RunSpec, pid: int) -> None:
    """A fresh scenario child's core dumps, turned on from here before it runs any code of the run's (it waits
    to be moved into its cgroup first, where it has one: child.joined), so that it need not import ``resource``
    (a third of a millisecond of every run's start). Best effort: a child that finds its limit low raises it
    itself (child.cores)."""
    if spec.plain or not wants_cores(spec):
        return
    if not pattern_is_local():
        return
    import resource

    try:
        _, hard = resource.prlimit(pid, resource.RLIMIT_CORE)
        resource.prlimit(pid, resource.RLIMIT_CORE, (hard, hard))
    except (OSError, ValueError):
        pass  # gone already, or not ours to change: the child does it


def child_argv(spec: RunSpec, *, as_script: bool = False) -> list[str]:
    """The child's command line: the bootstrap as ``-c CODE``, or as a script file for
    tools that pass arguments through a shell (``as_script``, see boot_script). A command is its own."""
    if spec.kind is RunKind.COMMAND:
        return list(spec.argv)
    path_dir = child_path_dir()
    if as_script:
        boot = [str(boot_script(path_dir))]
    else:
        optimized = any(flag.startswith("-O") for flag in spec.python_flags)  # the bundle was compiled without -O
        bundle = None if optimized else child_bundle(spec.interpreter.executable, tuple(spec.interpreter.version))
        boot = ["-c", boot_code(str(path_dir), bundle)]
    return [spec.interpreter.executable, "-X", "faulthandler", "-u", *spec.python_flags, *boot]




def core_files(run_dir: Path) -> list[Path]:
    """Core files in a run's folder (``core``, ``core.PID`` or a pattern starting with ``core``)."""
    return sorted(p for p in run_dir.glob("core*") if p.is_file())


@dataclass(frozen=True)
class RunFiles:
    """The run's folder and the files the child writes (opened by the supervisor)."""

    run_dir: Path
    stdout: Path
    stderr: Path
    events: Path

    @classmethod
    def create(cls, run_dir: Path, *, reuse: Path | None = None, emptied: bool = False) -> tuple[RunFiles, int]:
        """Make the folder and open the result channel for the child: O_APPEND, so lines from several
        processes never interleave. stdout and stderr reach their files through relays (run.relay).
        ``reuse``: the folder of a passed run that nothing uses any more, renamed into place and emptied
        instead of a new folder made (see _reuse); ``emptied``: it was emptied already (empty_run_folder, as
        the pytest plugin's spares are), so it is only renamed."""
        if run_dir.exists():  # a folder left by an earlier session: its files would mix with ours
            shutil.rmtree(run_dir, ignore_errors=True)
        if reuse is None or not _reuse(reuse, run_dir, emptied):
            run_dir.mkdir(parents=True, exist_ok=True)
        files = cls(run_dir, run_dir / protocol.STDOUT_FILE, run_dir / protocol.STDERR_FILE, run_dir / EVENTS_FILE)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC | os.O_CLOEXEC
        return files, os.open(files.events, flags, 0o644)

    @classmethod
    def existing(cls, run_dir: Path) -> RunFiles:
        """The files of a run whose folder and result channel were made before it (lifeguard.run.headstart)."""
        return cls(run_dir, run_dir / protocol.STDOUT_FILE, run_dir / protocol.STDERR_FILE, run_dir / EVENTS_FILE)


RUN_FILES = frozenset({protocol.STDOUT_FILE, protocol.STDERR_FILE, EVENTS_FILE})


def _reuse(old: Path, run_dir: Path, emptied: bool) -> bool:
    """Rename ``old`` (a finished run's folder) to ``run_dir`` and empty it (empty_run_folder), unless it was
    ``emptied`` already (looking again cost every forked test a folder listing and four stats). A forked test
    costs a few milliseconds, and a new folder with its three files is a good part of that on a file system
    that looks for recently deleted inodes before it reuses one (ext4 without a journal); a rename and three
    truncations allocate nothing. False (nothing changed) if it cannot be done."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(old, run_dir)
    except OSError:
        return False
    return emptied or empty_run_folder(run_dir)


def empty_run_folder(folder: Path) -> bool:
    """A finished run's folder made ready for another run: its run files truncated, one dump file kept (as
    protocol.SPARE_DUMP_FILE, for the next run's process to take: bootstrap), anything else removed (already
    empty: nothing written). False if that failed; the folder is removed then."""
    spare_dump = folder / protocol.SPARE_DUMP_FILE
    try:
        with os.scandir(folder) as entries:
            listed = list(entries)
        dump_kept = any(entry.name == protocol.SPARE_DUMP_FILE for entry in listed)
        for entry in listed:
            path, name, is_file = entry.path, entry.name, entry.is_file(follow_symlinks=False)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
                continue
            if is_file and not dump_kept and protocol.is_faulthandler_file(name):
                os.rename(path, spare_dump)
                path, dump_kept = str(spare_dump), True
            elif not is_file or (name not in RUN_FILES and name != protocol.SPARE_DUMP_FILE):
                os.unlink(path)
                continue
            if os.stat(path).st_size:
                os.truncate(path, 0)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return False
    return True


def spec_env(spec: RunSpec) -> str:
    """The value of SPEC_ENV for ``spec``: the spec as a Python literal, or, past SPEC_INLINE_LIMIT, "@" and the
    file of the run's folder it is written to (the kernel refuses an environment string over 128 KiB)."""
    text = repr(child_spec(spec))
    if len(text) <= protocol.SPEC_INLINE_LIMIT:
        return text
    path = spec.run_dir / protocol.SPEC_FILE
    path.write_text(text, encoding="utf-8")  # repr escapes what UTF-8 cannot hold (a file name's surrogates)
    return "@" + str(path)


def child_spec(spec: RunSpec) -> protocol.ChildSpec:
    """What the child bootstrap needs to know (plain data: sent as a Python literal, or as JSON
    to the fork-server)."""
    return {
        "kind": spec.kind.value, "path": spec.path, "function": spec.function, "code": spec.code,
        "fixture": spec.fixture, "fixture_dir": spec.fixture_dir, "run_dir": str(spec.run_dir),
        "dump_signal": int(DUMP_SIGNAL), "argv": list(spec.argv),
        "cores": wants_cores(spec),
        "seed": spec.seed, "perturbations": list(spec.perturbations), "variant": spec.variant,
        "exit": "fast" if spec.mode is StartMode.FORK_FAST else "full",
        "module": spec.module, "workdir": spec.workdir, "bytecode": file_bytecode(spec),
    }


def attach_spec(spec: RunSpec) -> protocol.AttachSpec:
    """What a Python process of a plain run that lifeguard did not start needs (protocol.ATTACH_KEYS)."""
    full = child_spec(spec)
    return {"run_dir": full["run_dir"], "dump_signal": full["dump_signal"], "cores": full["cores"],
            "seed": full["seed"], "perturbations": full["perturbations"]}


# Python processes of a plain run's tree that the attach hook cannot reach (-I, -S) still print
# faulthandler's tracebacks on a fatal signal.
FAULTHANDLER_ENV = "PYTHONFAULTHANDLER"
PYTHONPATH_ENV = "PYTHONPATH"


def child_env(spec: RunSpec, run_id: str, *, events_fd: int | None = None,
              events_path: Path | None = None) -> dict[str, str]:
    """The environment entries lifeguard adds for a run; the result channel is an inherited
    descriptor, or a path (for a child started by a tool that passes no descriptors)."""
    env = dict(spec.env)
    env.update({protocol.RUN_ID_ENV: run_id, protocol.VARIANT_ENV: spec.variant})
    if not spec.plain:  # a plain target is a program of its own: a lifeguard it runs must work as anywhere
        env[protocol.CHILD_ENV] = "1"
    if events_fd is not None:
        env[protocol.EVENTS_FD_ENV] = str(events_fd)
    if events_path is not None:
        env[protocol.EVENTS_PATH_ENV] = str(events_path)
    if spec.plain:
        # Every Python process of the tree attaches to the run through the site hook, and finds the result
        # channel by path (a subprocess does not inherit the descriptor).
        env[protocol.EVENTS_PATH_ENV] = str(events_path or spec.run_dir / EVENTS_FILE)
        env[protocol.ATTACH_ENV] = repr(attach_spec(spec))
        inherited = os.environ.get(PYTHONPATH_ENV)
        env[PYTHONPATH_ENV] = str(site_hook_dir()) + (os.pathsep + inherited if inherited else "")
        env[FAULTHANDLER_ENV] = "1"
    return env
