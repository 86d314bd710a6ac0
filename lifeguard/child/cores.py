"""Core dumps of a run's processes: on only while a core can land in the run's own folder.

With a plain ``core_pattern`` (``core``, ``core.%p``: no ``/``, no pipe) the kernel writes a crashing
process's core into that process's working directory. A scenario runs in its run folder from the start,
so its processes raise ``RLIMIT_CORE`` at once. A plain target (a script, ``-m``, ``-c``, a command) works
in the user's folder, where a core must never land (the incident behind this: a 36 MB ``core`` left in a
project after a script's ``os.chdir``): its processes keep core dumps off (the supervisor gives them a soft
limit of 0) until finalization starts, then move into the run folder and turn them on. A crash at exit
(an atexit callback, ``Py_Finalize``, a C++ static destructor) leaves its core there; a crash before that
leaves none, and the run's notes say so.

Finalization is caught where CPython starts it (lifeguard.child.finalization): ``threading._shutdown``,
which joins the program's non-daemon threads; the hook runs after that join, before the atexit callbacks.
"""

import os

from lifeguard.child import crash_park, emit, finalization, protocol, unpatched


def core_pattern_is_local(pattern: str) -> bool:
    """Does the kernel write cores as a file in the crashing process's working directory?"""
    pattern = pattern.strip()
    return bool(pattern) and not pattern.startswith("|") and "/" not in pattern


_local: list[bool] = []  # the pattern's reading, once a process (a fork-server's children inherit it)


def pattern_is_local() -> bool:
    """Does the kernel write cores in the working directory? Read once a process."""
    if not _local:
        _local.append(_read_pattern())
    return _local[0]


def _read_pattern() -> bool:
    pattern = _read(protocol.CORE_PATTERN_FILE)
    return pattern is not None and core_pattern_is_local(pattern.decode(errors="replace"))


def _read(path: str) -> "bytes | None":
    """A small /proc file's bytes, None if it cannot be read. At the descriptor: a text file object's io machinery
    cost every forked test's exit about 40 copy-on-write faults."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 8192)
        finally:
            unpatched.close(fd)
    except OSError:
        return None


_on = [False]  # core dumps turned on in this process (inherited by its forks)


def allow_core_dumps() -> bool:
    """Raise RLIMIT_CORE to the hard limit, if cores land in the working directory (else they would be
    written elsewhere, or piped to a handler). A fresh scenario child finds it raised by the supervisor
    already (lifeguard.run.launch.raise_core_limit); anything else raises it here (not in a preexec_fn:
    that would make the supervisor's spawn unsafe with several worker threads, and slower for every run)."""
    return pattern_is_local() and (_raised_already() or _raise_core_limit())


def _raised_already() -> bool:
    """Is this process's soft core limit its hard limit, and not 0? Read at /proc: importing ``resource``
    would cost every fresh run's start a third of a millisecond."""
    for line in (_read(protocol.LIMITS_FILE) or b"").splitlines():
        if line.startswith(b"Max core file size"):
            soft, hard = line.split()[4:6]
            _on[0] = soft == hard and soft != b"0"
            return _on[0]
    return False


def cores_in_run_folder(run_dir: str, local: bool | None = None) -> None:
    """Move into the run's folder and turn core dumps on (the working directory before is noted). ``local``:
    whether the kernel's core pattern is local, read at start-up (at_finalization), else read here."""
    try:
        before = os.getcwd()
    except OSError:  # removed under us
        before = "?"
    if _on[0] and before == run_dir:
        return  # a scenario that never left its folder
    if local is False:
        return  # cores would land elsewhere: stay where the program was
    try:
        os.chdir(run_dir)
    except OSError:
        return  # the folder is gone: no core is better than one in the user's folder
    if _raise_core_limit() if local else allow_core_dumps():
        emit(protocol.CORES_ON, cwd=before)


def _raise_core_limit() -> bool:
    if _on[0]:
        return True  # on already in this process (or the process it was forked from)
    import resource  # at exit, loaded at start-up already (at_finalization)

    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    except (ValueError, OSError):
        return False
    _on[0] = hard != 0
    return _on[0]


def at_finalization(run_dir: str, *, cores: bool, body_end: bool) -> None:
    """Run ``cores_in_run_folder`` (when ``cores``) and emit ``body-end`` (when ``body_end``: a process
    whose main code lifeguard did not run itself) as the interpreter starts finalizing (the program's
    non-daemon threads joined first: they may still use relative paths)."""

    # The kernel's core pattern is read, and the resource module loaded, now rather than at exit: the exit of a
    # run's process must take as long as the same program's without lifeguard, or a thread racing it (a native
    # thread calling into Python as the interpreter finalizes) loses races it would win (benchmarks/fidelity.py:
    # half a millisecond here, on every exit).
    local = pattern_is_local() if cores else False
    if local and not _on[0]:
        import resource  # noqa: F401  (loaded for _raise_core_limit)

    def begin() -> None:
        if body_end:
            emit(protocol.BODY_END)

    def after_join() -> None:
        if cores:  # a forked child that finalizes (instead of os._exit) gets here too: its core as well
            if local:
                crash_park.remove()  # from here on a core says more (a fault address); without one, stay parked
            cores_in_run_folder(run_dir, local)

    finalization.on_start(begin, after_join)
