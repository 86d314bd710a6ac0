"""The fast capture back ends with real processes: pystack (native and Python frames), eu-stack (native
frames of any process), the per-process fallback between them, and pystack on a real core.

Children are the ones test_capture.py uses (a 4-thread Python hang reached through a handshake), plus a
real C program. After a child's "ready" the test also waits until the kernel shows every thread asleep,
so a thread just woken (the GIL waiter) has reached the call it blocks in. Every child runs in its own
session and is killed as a group when its test ends; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lifeguard.capture import gdb_available
from lifeguard.capture.eu_stack import capture_eu_stack, eu_stack_available
from lifeguard.capture.native import (
    HANG_BACKENDS,
    HangBackend,
    analyse_crash_cores,
    available_hang_backends,
    capture_process,
    fallback_hang_hook,
    native_capture_hooks,
)
from lifeguard.capture.pystack_backend import analyse_core_pystack, capture_pystack, pystack_available
from lifeguard.model.stacks import GIL_HELD, GIL_RELEASED, GIL_WAITING, ProcessStacks, ThreadStack, base_function
from lifeguard.run.supervise import HangContext
from tests.helpers import FREE_THREADED, NEEDS_GIL, ROOT, crash_with_core, pyenv_python, real_python, run_cli
from tests.integration.test_capture import (
    BLOCKED_ON_LOCK,
    CRASH_PROGRAM,
    ECHO_PROGRAM,
    HUNG_PROGRAM,
    Child,
    assert_running,
    by_role,
    interpreters,
    kill_group,
    read_until,
    start_echo,
    start_hung,
    thread_states,
    version_id,
)

READY_TIMEOUT = 20.0  # a child reaching its hang
ASLEEP_TIMEOUT = 20.0  # its threads reaching their blocking calls once it said "ready"
CAPTURE_TIMEOUT = 30.0  # one capture; far above the ~0.3 s it takes
assert READY_TIMEOUT < CAPTURE_TIMEOUT

pytestmark = pytest.mark.timeout(300)
needs_pystack = pytest.mark.skipif(pystack_available() is None,
                                   reason="pystack is not installed for this interpreter (pip install pystack)")
needs_eu_stack = pytest.mark.skipif(eu_stack_available() is None,
                                    reason="eu-stack is not installed (apt-get install elfutils)")

# A C program: main joins a worker blocked in read() on a pipe nobody writes; built with -g so the
# frames have source lines.
C_PROGRAM = textwrap.dedent(
    r"""
    #include <pthread.h>
    #include <stdio.h>
    #include <unistd.h>

    static int fds[2];

    static void *worker_blocks_in_read(void *arg) {
        char byte;
        (void)arg;
        printf("ready\n");
        fflush(stdout);
        read(fds[0], &byte, 1);
        return NULL;
    }

    int main(void) {
        pthread_t worker;
        if (pipe(fds) != 0) return 1;
        pthread_create(&worker, NULL, worker_blocks_in_read, NULL);
        pthread_join(worker, NULL);
        return 0;
    }
    """
)
C_READ_LINE = 1 + C_PROGRAM.splitlines().index("    read(fds[0], &byte, 1);")

# A parent and two forked children, all blocked on a lock the parent held when it forked.
TREE_PROGRAM = textwrap.dedent(
    """
    import os, threading
    lock = threading.Lock()
    lock.acquire()
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            lock.acquire()  # the child's copy of the lock is held too: blocked for good
        children.append(pid)
    print("ready", *children, flush=True)
    lock.acquire()
    """
)


def wait_until_asleep(pid: int, timeout: float = ASLEEP_TIMEOUT) -> None:
    """Wait (bounded) until every thread of ``pid`` sleeps in the kernel: blocked where the test
    expects it, not on its way there."""
    deadline = time.monotonic() + timeout
    while True:
        states = thread_states(pid)
        if states and all(state == "S" for state in states.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"threads of {pid} not all asleep within {timeout} s: {states}")
        time.sleep(0.01)


def python_names(thread: ThreadStack) -> list[str]:
    return [f.function or "" for f in thread.python_frames]


def assert_python_frames_sit_on_eval_frames(stacks: ProcessStacks) -> None:
    for thread in stacks.threads:
        for newer, older in zip(thread.frames, thread.frames[1:], strict=False):
            if newer.is_python:
                assert older.is_python or older.is_eval_frame, (thread.tid, newer, older)
        if thread.python_frames:
            assert python_names(thread)[-1] in ("<module>", "_bootstrap"), python_names(thread)


def assert_the_hung_program(stacks: ProcessStacks, child: Child, script: Path) -> None:
    """What every reader of HUNG_PROGRAM (test_capture.py) must see: threads, blocking calls, GIL, Python."""
    assert stacks.error is None, stacks.error
    assert stacks.backend_label == "pystack"
    assert len(stacks.threads) == 4
    threads = by_role(stacks, child)
    assert threads["main"].tid == child.pid
    for role in ("main", "lock_waiter", "gil_waiter"):
        assert any(BLOCKED_ON_LOCK.search(name) for name in threads[role].function_names()), role
    holder = threads["gil_holder"].function_names()
    assert any(re.search(r"system|waitpid|wait4", name) for name in holder), holder
    assert "ffi_call" in holder and "take_gil" in map(base_function, threads["gil_waiter"].function_names())
    assert threads["gil_holder"].gil == GIL_HELD
    assert threads["gil_waiter"].gil == GIL_WAITING
    assert threads["lock_waiter"].gil == GIL_RELEASED and threads["main"].gil == GIL_RELEASED
    assert python_names(threads["main"])[-2:] == ["main_joins", "<module>"]
    assert python_names(threads["lock_waiter"])[0] == "wait_for_lock"
    assert "wait_for_turn" in python_names(threads["gil_waiter"])
    assert python_names(threads["gil_holder"])[0] == "hold_gil_in_native"
    lock_waiter_frame = threads["lock_waiter"].python_frames[0]
    assert lock_waiter_frame.file == str(script)
    assert lock_waiter_frame.line == 1 + HUNG_PROGRAM.splitlines().index("    lock.acquire()")
    assert all(t.name for t in stacks.threads)  # from /proc/PID/task/TID/comm
    assert_python_frames_sit_on_eval_frames(stacks)


def start_hung_asleep(python: str, tmp_path: Path) -> Child:
    child = start_hung(python, tmp_path)
    try:
        wait_until_asleep(child.pid)
    except AssertionError:
        kill_group(child.process)
        raise
    return child


@pytest.mark.skipif(FREE_THREADED, reason=NEEDS_GIL)
@needs_pystack
@pytest.mark.parametrize("python", interpreters(), ids=version_id)
def test_pystack_reads_threads_blocking_calls_python_frames_and_the_gil(python: str, tmp_path: Path) -> None:
    child = start_hung_asleep(python, tmp_path)
    try:
        stacks = capture_pystack(child.pid, timeout=CAPTURE_TIMEOUT)
        assert stacks.exe == os.path.realpath(python)
        assert_the_hung_program(stacks, child, tmp_path / "hung_program.py")
        for thread in stacks.threads:
            native = [f for f in thread.frames if not f.is_python]
            assert all(f.address and f.address.startswith("0x") for f in native)
            assert any(f.library and f.library.endswith(".so.6") for f in native)  # libc, by its path
            assert all(f.library != stacks.exe for f in native)  # the executable is no shared object
        assert ProcessStacks.from_dict(json.loads(json.dumps(stacks.to_dict()))) == stacks
        assert_running(child.pid)
    finally:
        kill_group(child.process)


SUPERVISOR_SCRIPT = """
import json, sys
from lifeguard.capture.native import HANG_BACKENDS, capture_process
pystack = tuple(b for b in HANG_BACKENDS if b.name == "pystack")
stacks = capture_process(int(sys.argv[1]), pystack)
print(json.dumps({"supervisor": list(sys.version_info[:2]), "stacks": stacks.to_dict()}))
"""


def python_311_with_pystack() -> str | None:
    """A CPython 3.11 that can import pystack (the test interpreter itself, most often)."""
    candidates = [real_python()] if sys.version_info[:2] == (3, 11) else []
    candidates += [c for c in (pyenv_python("3.11"),) if c]
    for candidate in candidates:
        probe = subprocess.run([candidate, "-c", "import pystack"], capture_output=True, timeout=CAPTURE_TIMEOUT,
                               stdin=subprocess.DEVNULL, check=False)
        if probe.returncode == 0:
            return candidate
    return None


def test_a_313_child_read_from_a_311_supervisor(tmp_path: Path) -> None:
    child_python = pyenv_python("3.13")
    if child_python is None:
        pytest.skip("no CPython 3.13 installed here")
    supervisor = python_311_with_pystack()
    if supervisor is None:
        pytest.skip("no CPython 3.11 with pystack installed here")
    child = start_hung_asleep(child_python, tmp_path)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        result = subprocess.run([supervisor, "-c", SUPERVISOR_SCRIPT, str(child.pid)], capture_output=True,
                                text=True, timeout=CAPTURE_TIMEOUT, env=env, stdin=subprocess.DEVNULL, check=False)
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["supervisor"] == [3, 11]
        assert_the_hung_program(ProcessStacks.from_dict(document["stacks"]), child, tmp_path / "hung_program.py")
        assert_running(child.pid)
    finally:
        kill_group(child.process)


@pytest.fixture
def c_program(tmp_path: Path) -> Path:
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        pytest.skip("no C compiler (apt-get install gcc)")
    source = tmp_path / "blocked.c"
    source.write_text(C_PROGRAM)
    binary = tmp_path / "blocked"
    subprocess.run([compiler, "-g", "-O0", "-pthread", "-o", str(binary), str(source)], check=True,
                   timeout=CAPTURE_TIMEOUT, stdin=subprocess.DEVNULL)
    return binary


def start_c(binary: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([str(binary)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    assert process.stdout is not None
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
        wait_until_asleep(process.pid)
    except AssertionError:
        kill_group(process)
        raise
    return process


def assert_the_c_program(stacks: ProcessStacks, process: subprocess.Popen[bytes], source: Path) -> None:
    assert stacks.error is None, stacks.error
    assert len(stacks.threads) == 2
    main = stacks.thread(process.pid)
    assert main is not None and main.name == "blocked"
    assert any("join" in name for name in main.function_names()), main.function_names()
    assert "main" in main.function_names()
    [worker] = [t for t in stacks.threads if t.tid != process.pid]
    names = worker.function_names()
    # The read is the innermost call of the worker's own function (glibc 2.41+ adds __syscall_cancel* under it).
    assert any(re.search(r"read", name) for name in names[:names.index("worker_blocks_in_read")]), names
    [frame] = [f for f in worker.frames if f.function == "worker_blocks_in_read"]
    assert frame.file == str(source) and frame.line == C_READ_LINE
    assert frame.library is None  # the executable itself
    assert not worker.python_frames and worker.gil is None


@needs_eu_stack
def test_eu_stack_reads_a_c_program(c_program: Path) -> None:
    process = start_c(c_program)
    try:
        stacks = capture_eu_stack(process.pid, timeout=CAPTURE_TIMEOUT)
        assert stacks.backend_label == "eu-stack"
        assert_the_c_program(stacks, process, c_program.with_suffix(".c"))
        assert_running(process.pid)
    finally:
        kill_group(process)


@needs_eu_stack
def test_a_call_into_a_library_without_symbols_is_named_by_its_call_site(c_program: Path) -> None:
    """Without libc's debug symbols (Debian's glibc 2.41) pthread_join's own frames are nameless and a join reads
    as a wait in "??": the caller's call instruction, read from the live process through its PLT stub, still
    names pthread_join. The one stand-in: this libc has its symbols, so its names are dropped from the real read."""
    from dataclasses import replace

    from lifeguard.capture.symbols import call_sites
    from lifeguard.diagnose.evidence import JOIN_FUNCTIONS, first_frame, matches

    process = start_c(c_program)
    try:
        stacks = capture_eu_stack(process.pid, timeout=CAPTURE_TIMEOUT)
        main = stacks.thread(process.pid)
        assert main is not None and "main" in main.function_names(), stacks
        in_libc = [f for f in main.frames if "libc.so" in (f.library or "")]
        assert in_libc, main.frames
        nameless = replace(main, frames=tuple(replace(f, function=None) if f in in_libc else f for f in main.frames))
        assert first_frame(nameless, JOIN_FUNCTIONS) is None
        [read] = call_sites(replace(stacks, threads=(nameless,))).threads
        [caller] = [f for f in read.frames if f.function == "main"]
        assert matches(caller.calls, JOIN_FUNCTIONS), caller
        found = first_frame(read, JOIN_FUNCTIONS)
        assert found is not None and read.frames[found[0] + 1] is caller and found[1].function == caller.calls
        assert_running(process.pid)
    finally:
        kill_group(process)


@needs_pystack
@needs_eu_stack
def test_a_process_pystack_cannot_read_goes_to_the_next_back_end(c_program: Path) -> None:
    process = start_c(c_program)
    try:
        alone = capture_pystack(process.pid, timeout=CAPTURE_TIMEOUT)
        assert alone.error is not None and "python version" in alone.error.lower(), alone.error
        stacks = capture_process(process.pid, available_hang_backends())
        assert stacks.backend_label == "eu-stack"
        assert_the_c_program(stacks, process, c_program.with_suffix(".c"))
        assert stacks.notes and stacks.notes[0].startswith("read by eu-stack after: pystack:"), stacks.notes
        assert_running(process.pid)
    finally:
        kill_group(process)


@needs_pystack
def test_one_hook_reads_a_tree_every_process_at_once(tmp_path: Path) -> None:
    hooks = native_capture_hooks()
    assert len(hooks) == 1  # one back end per tree: no process is read twice
    script = tmp_path / "tree.py"
    script.write_text(TREE_PROGRAM)
    parent = subprocess.Popen([real_python(), str(script)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    assert parent.stdout is not None
    try:
        line = read_until(parent.stdout.fileno(), "\n", READY_TIMEOUT)
        pids = [parent.pid] + [int(pid) for pid in line.split()[1:]]
        assert len(pids) == 3
        for pid in pids:
            wait_until_asleep(pid)
        # Each read waits at a barrier for the other two: only reads that run at the same time get past it.
        barrier = threading.Barrier(len(pids), timeout=CAPTURE_TIMEOUT)

        def together(pid: int, timeout: float) -> ProcessStacks:
            barrier.wait()
            return capture_pystack(pid, timeout)

        backends = (HangBackend("pystack", pystack_available, together, CAPTURE_TIMEOUT, ""),)
        hook = fallback_hang_hook(backends)
        processes = hook(HangContext(spec=None, pids=pids))  # type: ignore[arg-type]  # the hook reads pids only
        assert [p.pid for p in processes] == pids
        for process in processes:
            assert process.error is None, process.error
            assert process.backend_label == "pystack" and len(process.threads) == 1
            assert python_names(process.threads[0])[-1] == "<module>"
            assert any(BLOCKED_ON_LOCK.search(n) for n in process.threads[0].function_names())
        # The table's own hook (with the kernel state sampler around it) reads the same tree.
        [real] = [hook(HangContext(spec=None, pids=pids)) for hook in hooks]  # type: ignore[arg-type]
        assert [p.pid for p in real] == pids and all(p.ok and p.backend_label == "pystack" for p in real)
    finally:
        kill_group(parent)


@needs_pystack
def test_attach_refused_stops_the_fallback_and_says_why(tmp_path: Path) -> None:
    script = tmp_path / "traced.py"
    # PTRACE_TRACEME makes this test process the tracer: any other tracer is refused.
    script.write_text("import ctypes, sys\nctypes.CDLL(None).ptrace(0, 0, 0, 0)\n" + ECHO_PROGRAM)
    process = start_echo(script)
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
        stacks = capture_process(process.pid, available_hang_backends())
        assert stacks.error is not None and "Operation not permitted" in stacks.error, stacks.error
        assert "CAP_SYS_PTRACE" in stacks.error  # what to do about it
        assert "eu-stack" not in stacks.error and "gdb:" not in stacks.error  # no ptrace tool can get past it
    finally:
        kill_group(process)  # SIGKILL only: any other signal would stop a traced process


@pytest.mark.parametrize("capture", [capture_pystack, capture_eu_stack], ids=["pystack", "eu-stack"])
def test_gone_and_zombie_processes_are_errors_not_exceptions(capture: object) -> None:
    assert callable(capture)
    gone = subprocess.Popen([real_python(), "-c", "pass"])
    gone.wait(timeout=CAPTURE_TIMEOUT)
    stacks = capture(gone.pid, CAPTURE_TIMEOUT)
    assert stacks.error == "No such process" and stacks.threads == ()
    zombie = subprocess.Popen([real_python(), "-c", "pass"])
    try:
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
        stacks = capture(zombie.pid, CAPTURE_TIMEOUT)
        assert stacks.error is not None and "zombie" in stacks.error
        chained = capture_process(zombie.pid, HANG_BACKENDS)
        assert chained.error is not None and chained.error.count("zombie") == 1  # not tried again
    finally:
        zombie.wait(timeout=CAPTURE_TIMEOUT)


@needs_pystack
@pytest.mark.parametrize("deadline", [0.01, 0.1])
def test_a_read_past_its_deadline_is_killed_and_the_process_keeps_running(tmp_path: Path, deadline: float) -> None:
    script = tmp_path / "echo.py"
    script.write_text(ECHO_PROGRAM)
    process = start_echo(script)
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
        stacks = capture_pystack(process.pid, timeout=deadline)
        if deadline < 0.05 or stacks.error is not None:  # no reader starts in 10 ms; 100 ms may just do
            assert stacks.error is not None and "timed out" in stacks.error, stacks.error
        assert_running(process.pid)
        process.stdin.write(b"still-alive\n")
        process.stdin.flush()
        read_until(process.stdout.fileno(), "still-alive", READY_TIMEOUT)
    finally:
        kill_group(process)


@needs_pystack
def test_pystack_reads_a_crash_core(tmp_path: Path) -> None:
    python = real_python()
    pid, core = crash_with_core(tmp_path, CRASH_PROGRAM, python, CAPTURE_TIMEOUT)
    stacks = analyse_core_pystack(core, python, timeout=CAPTURE_TIMEOUT)
    assert stacks.error is None, stacks.error
    assert stacks.backend_label == "pystack-core" and stacks.pid == pid
    assert stacks.signal is not None and stacks.signal.name == "SIGSEGV" and stacks.signal.address == "0x0"
    crashed = stacks.thread(stacks.signal.tid or -1)
    assert crashed is not None and crashed.tid == pid
    assert crashed.gil == GIL_HELD or FREE_THREADED  # pystack reads no holder where there is no GIL
    names = crashed.function_names()
    assert any("strlen" in name for name in names[:3]) and "string_at" in names, names
    assert python_names(crashed)[-2:] == ["crash_now", "<module>"]
    assert all(f.library is None or f.library.startswith("/") for f in crashed.frames)  # paths, not names
    assert_python_frames_sit_on_eval_frames(stacks)
    # The crash path prefers it too (and keeps the core when asked).
    [chosen], notes = analyse_crash_cores([core], python, keep=True)
    assert chosen.backend_label == "pystack-core" and not notes and core.exists()


@needs_pystack
def test_doctor_names_the_back_end_in_use() -> None:
    proc = run_cli("doctor")
    line = next(line for line in proc.stdout.splitlines() if "native capture" in line)
    assert line.startswith("ok") and "hangs read by pystack" in line, proc.stdout


@needs_eu_stack
@pytest.mark.skipif(shutil.which("strip") is None or gdb_available() is None, reason="needs strip and gdb")
@pytest.mark.parametrize("thorough", [False, True])
def test_a_thorough_read_of_unnamed_frames_is_gdbs(c_program: Path, thorough: bool) -> None:
    """A process that ended itself is read thoroughly: frames a fast back end left unnamed (here a stripped
    program's; JIT-compiled code's in the field) are read again by gdb, which names JIT code."""
    subprocess.run(["strip", "--strip-all", str(c_program)], check=True, timeout=CAPTURE_TIMEOUT)
    process = start_c(c_program)
    try:
        backends = tuple(b for b in available_hang_backends() if b.name in ("eu-stack", "gdb"))
        stacks = capture_process(process.pid, backends, thorough=thorough)
        assert stacks.error is None, stacks.error
        if thorough:
            assert stacks.backend_label.startswith("gdb"), stacks.backend_label
            assert stacks.notes[0] == "read by gdb: eu-stack left native frames unnamed", stacks.notes
        else:
            assert stacks.backend_label == "eu-stack"
            assert any(f.function in (None, "??") for t in stacks.threads for f in t.frames)
        assert_running(process.pid)
    finally:
        kill_group(process)


def test_a_frame_in_the_executable_gets_its_path() -> None:
    """A back end may leave the executable's own frames without a library (pystack does, for Debian's
    statically linked python3.14): a live process's are given the executable's path, so the interpreter's code
    is known as the interpreter's; a frame elsewhere keeps what it had."""
    from dataclasses import replace

    from lifeguard.capture.symbols import resolve_live
    from lifeguard.model.stacks import Frame

    sleeper = subprocess.Popen([real_python(), "-c", "import sys, time; print(flush=True); time.sleep(60)"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"\n"  # started: its mappings are made
        executable = os.readlink(f"/proc/{sleeper.pid}/exe")
        maps = [line.split(None, 5) for line in Path(f"/proc/{sleeper.pid}/maps").read_text().splitlines()]
        start = next(int(fields[0].split("-")[0], 16) for fields in maps if fields[5:] == [executable])
        inside = Frame(function="main", address=hex(start + 16))
        outside = Frame(function="elsewhere", address="0x10")  # below every mapping
        process = ProcessStacks(pid=sleeper.pid, threads=(ThreadStack(tid=sleeper.pid, frames=(inside, outside)),))
        [named] = resolve_live([process])
        frames = named.threads[0].frames
        assert frames[0] == replace(inside, library=executable, file=frames[0].file, line=frames[0].line)
        assert frames[1].library is None
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)
