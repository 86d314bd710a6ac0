"""Native backtrace capture with real gdb: real hung processes, a real core, real errors.

Every child runs in its own session and is killed as a group when its test ends;
children tell the test they reached their final state through a pipe (handshakes,
no sleeps), and every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lifeguard.capture import (
    analyse_core,
    capture_live,
    find_python_gdb,
    gdb_available,
    merge_faulthandler,
    parse_faulthandler,
)
from lifeguard.errors import GdbNotFoundError
from lifeguard.model.stacks import (
    GIL_HELD,
    GIL_RELEASED,
    GIL_WAITING,
    ProcessStacks,
    ThreadStack,
    render_text,
)
from tests.helpers import FREE_THREADED, NEEDS_GIL, crash_with_core, pyenv_python, real_python

READY_TIMEOUT = 20.0  # a child reaching its hang; generous for a loaded CI machine
CAPTURE_TIMEOUT = 30.0  # one gdb capture; far above the ~0.5 s it takes
CRASH_TIMEOUT = 30.0
assert READY_TIMEOUT < CAPTURE_TIMEOUT  # a slow start must fail as "not ready", not as a capture timeout

pytestmark = pytest.mark.skipif(gdb_available() is None, reason=f"gdb is not available. {GdbNotFoundError.HELP_TEXT}")

# Four threads in a state that cannot change, reached deterministically:
# - main joins `lock_waiter`, which blocks on a Lock main holds;
# - `gil_holder` calls libc system() through ctypes.PyDLL, which keeps the GIL;
#   the shell it starts prints "ready", so "ready" means the GIL is held for good;
# - `gil_waiter` was woken just before and now waits for the GIL forever.
# A huge switch interval stops the eval loop from handing the GIL over on its
# own, so each thread gets to its blocking call before the next one runs.
HUNG_PROGRAM = textwrap.dedent(
    """
    import ctypes, json, sys, threading
    sys.setswitchinterval(1e5)
    lock = threading.Lock()
    lock.acquire()
    go = threading.Event()
    waiter_go = threading.Event()
    libc = ctypes.PyDLL(None)

    def wait_for_lock():
        lock.acquire()

    def wait_for_turn():
        waiter_go.wait()

    def hold_gil_in_native():
        go.wait()
        waiter_go.set()
        libc.system(b"echo ready; exec sleep 600")

    def main_joins():
        threads = {
            "lock_waiter": threading.Thread(target=wait_for_lock),
            "gil_waiter": threading.Thread(target=wait_for_turn),
            "gil_holder": threading.Thread(target=hold_gil_in_native),
        }
        for thread in threads.values():
            thread.start()
        roles = {name: thread.native_id for name, thread in threads.items()}
        roles["main"] = threading.get_native_id()
        with open(sys.argv[1], "w") as ids:
            json.dump(roles, ids)
        go.set()
        threads["lock_waiter"].join()

    if len(sys.argv) > 2:
        import faulthandler, os, signal
        dump_to = os.fdopen(int(sys.argv[2]), "w")
        faulthandler.register(signal.SIGUSR1, file=dump_to, all_threads=True)
    main_joins()
    """
)

# A loop that answers each line on stdin, so a test can prove the process still runs.
ECHO_PROGRAM = textwrap.dedent(
    """
    import sys
    print("ready", flush=True)
    for line in sys.stdin:
        print(line.strip(), flush=True)
    """
)

CRASH_PROGRAM = textwrap.dedent(
    """
    import ctypes, resource
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    def crash_now():
        ctypes.string_at(0)  # reads address 0: SIGSEGV inside libc's strlen

    crash_now()
    """
)

# Native frames of a thread blocked on a lock / semaphore / condition, across libc variants.
BLOCKED_ON_LOCK = re.compile(r"futex|sem_\w*wait|__timedwait|pthread_cond_\w*wait|lll_lock_wait")


def interpreters() -> list[str]:
    """The interpreter running the tests, plus other CPython versions installed here."""
    found = [real_python()]  # as started (a venv's link keeps its packages); the others resolved
    for version in ("3.10", "3.11", "3.12", "3.13"):
        exe = pyenv_python(version)
        if exe and os.path.realpath(exe) not in {os.path.realpath(f) for f in found}:
            found.append(os.path.realpath(exe))
    return found


def version_id(exe: str) -> str:
    return Path(exe).name


@dataclass
class Child:
    process: subprocess.Popen[bytes]
    roles: dict[str, int]  # role -> kernel thread id
    dump_reader: int | None = None  # read end of the faulthandler pipe

    @property
    def pid(self) -> int:
        return self.process.pid


def read_until(fd: int, pattern: str, timeout: float) -> str:
    """Read from a pipe until ``pattern`` shows up; fail at the deadline or at EOF."""
    deadline = time.monotonic() + timeout
    data = b""
    while pattern.encode() not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {pattern!r} within {timeout} s; got {data[-500:]!r}")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"pipe closed before {pattern!r}; got {data[-500:]!r}")
            data += chunk
    return data.decode(errors="replace")


def kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=CAPTURE_TIMEOUT)


def start_hung(python: str, tmp_path: Path, *, faulthandler_pipe: bool = False) -> Child:
    script = tmp_path / "hung_program.py"
    script.write_text(HUNG_PROGRAM)
    ids_path = tmp_path / "thread_ids.json"
    argv = [python, str(script), str(ids_path)]
    pass_fds: tuple[int, ...] = ()
    dump_reader = dump_writer = None
    if faulthandler_pipe:
        dump_reader, dump_writer = os.pipe()
        argv.append(str(dump_writer))
        pass_fds = (dump_writer,)
    with open(tmp_path / "stderr.txt", "wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            pass_fds=pass_fds,
            start_new_session=True,
        )
    if dump_writer is not None:
        os.close(dump_writer)
    assert process.stdout is not None
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
    except AssertionError:
        kill_group(process)
        raise AssertionError((tmp_path / "stderr.txt").read_text()) from None
    roles = json.loads(ids_path.read_text())
    return Child(process, roles, dump_reader)


@pytest.fixture
def hung_child(tmp_path: Path) -> Iterator[Child]:
    child = start_hung(real_python(), tmp_path)
    yield child
    kill_group(child.process)


def thread_states(pid: int) -> dict[int, str]:
    states = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        states[int(task.name)] = stat.rsplit(")", 1)[1].split()[0]
    return states


def assert_running(pid: int) -> None:
    stopped = {tid: state for tid, state in thread_states(pid).items() if state in ("T", "t")}
    assert not stopped, f"threads left stopped after capture: {stopped}"


def skip_if_ptrace_refused(stacks: ProcessStacks) -> None:
    if stacks.error and "Operation not permitted" in stacks.error:
        pytest.skip(
            "ptrace attach is refused here: run as root, or set /proc/sys/kernel/yama/ptrace_scope "
            "to 0, or give the container CAP_SYS_PTRACE"
        )


def python_names(thread: ThreadStack) -> list[str]:
    return [f.function or "" for f in thread.python_frames]


def by_role(stacks: ProcessStacks, child: Child) -> dict[str, ThreadStack]:
    threads = {}
    for role, tid in child.roles.items():
        thread = stacks.thread(tid)
        assert thread is not None, f"{role} thread {tid} missing from {[t.tid for t in stacks.threads]}"
        threads[role] = thread
    return threads


@pytest.mark.skipif(FREE_THREADED, reason=NEEDS_GIL)
@pytest.mark.parametrize("python", interpreters(), ids=version_id)
def test_live_capture_of_hung_threads(python: str, tmp_path: Path) -> None:
    child = start_hung(python, tmp_path)
    try:
        [stacks] = capture_live([child.pid], timeout=CAPTURE_TIMEOUT, cache_dir=tmp_path / "index-cache")
        skip_if_ptrace_refused(stacks)
        assert stacks.error is None, stacks.error
        assert stacks.pid == child.pid
        assert stacks.exe == os.path.realpath(python)
        assert len(stacks.threads) == 4
        threads = by_role(stacks, child)
        assert threads["main"].tid == child.pid

        # Native frames: everyone but the GIL holder sleeps on a lock of some kind.
        for role in ("main", "lock_waiter", "gil_waiter"):
            names = threads[role].function_names()
            assert any(BLOCKED_ON_LOCK.search(name) for name in names), (role, names)
        holder_names = threads["gil_holder"].function_names()
        assert any(re.search(r"system|waitpid|wait4", name) for name in holder_names), holder_names
        assert "ffi_call" in holder_names, holder_names
        assert "take_gil" in threads["gil_waiter"].function_names()

        assert threads["gil_holder"].gil == GIL_HELD
        assert threads["gil_waiter"].gil == GIL_WAITING
        assert threads["lock_waiter"].gil == GIL_RELEASED
        assert threads["main"].gil == GIL_RELEASED

        if find_python_gdb(python) is not None:
            assert stacks.backend_label == "gdb+python-gdb"
            assert python_names(threads["main"])[-2:] == ["main_joins", "<module>"]
            assert python_names(threads["lock_waiter"])[0] == "wait_for_lock"
            assert "wait_for_turn" in python_names(threads["gil_waiter"])
            assert python_names(threads["gil_holder"])[0] == "hold_gil_in_native"
            for thread in stacks.threads:
                # each Python frame sits right above (is newer than) an eval frame or another Python frame
                for newer, older in zip(thread.frames, thread.frames[1:], strict=False):
                    if newer.is_python:
                        assert older.is_python or older.is_eval_frame, (newer, older)
                assert python_names(thread)[-1] in ("<module>", "_bootstrap")
        else:
            assert stacks.backend_label == "gdb"

        text = render_text([stacks])
        assert f"Process {child.pid}" in text and "take_gil" in text
        assert ProcessStacks.from_dict(json.loads(json.dumps(stacks.to_dict()))) == stacks
        assert_running(child.pid)
    finally:
        kill_group(child.process)


@pytest.mark.skipif(FREE_THREADED, reason=NEEDS_GIL)
def test_faulthandler_dump_gives_python_frames_without_python_gdb(tmp_path: Path) -> None:
    child = start_hung(real_python(), tmp_path, faulthandler_pipe=True)
    assert child.dump_reader is not None
    try:
        [native] = capture_live([child.pid], timeout=CAPTURE_TIMEOUT, python_frames=False)
        skip_if_ptrace_refused(native)
        assert native.error is None, native.error
        assert native.backend_label == "gdb"
        assert not any(t.python_frames for t in native.threads)
        assert all(t.pthread_id for t in native.threads)

        os.kill(child.pid, signal.SIGUSR1)
        # faulthandler dumps the newest thread first and the main thread last.
        dump = read_until(child.dump_reader, "in <module>\n", READY_TIMEOUT)
        assert len(parse_faulthandler(dump)) == 4

        merged = merge_faulthandler(native, dump)
        assert merged.backend_label == "gdb+faulthandler"
        threads = by_role(merged, child)
        assert python_names(threads["main"])[-2:] == ["main_joins", "<module>"]
        assert python_names(threads["gil_holder"])[0] == "hold_gil_in_native"
        assert python_names(threads["lock_waiter"])[0] == "wait_for_lock"
        native_by_tid = {thread.tid: thread for thread in native.threads}
        merged_by_tid = {thread.tid: thread for thread in merged.threads}
        for thread in merged.threads:
            # native frames are kept, in order, and Python frames sit before eval frames
            assert [f for f in thread.frames if not f.is_python] == list(native_by_tid[thread.tid].frames)
            position = max(i for i, f in enumerate(thread.frames) if f.is_python)
            assert thread.frames[position + 1].is_eval_frame
        # Matching a python-gdb capture of the same threads: same Python functions, same order.
        if find_python_gdb(real_python()) is not None:
            [full] = capture_live([child.pid], timeout=CAPTURE_TIMEOUT)
            for thread in full.threads:
                if thread.tid != child.roles["main"]:  # main was interrupted by the dump signal
                    assert python_names(thread) == python_names(merged_by_tid[thread.tid])
        assert_running(child.pid)
    finally:
        os.close(child.dump_reader)
        kill_group(child.process)


@pytest.mark.skipif(FREE_THREADED, reason=NEEDS_GIL)
def test_parallel_capture_of_several_processes(tmp_path: Path) -> None:
    children: list[Child] = []
    try:
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
            children.append(start_hung(real_python(), tmp_path / name))
        pids = [c.pid for c in children]
        results = capture_live(pids, timeout=CAPTURE_TIMEOUT, cache_dir=tmp_path / "index-cache")
        for result in results:
            skip_if_ptrace_refused(result)
        assert [r.pid for r in results] == pids
        assert all(r.error is None and len(r.threads) == 4 for r in results), [r.error for r in results]
        for pid in pids:
            assert_running(pid)
    finally:
        for child in children:
            kill_group(child.process)


def test_attach_to_missing_process_is_an_error_not_an_exception() -> None:
    gone = subprocess.Popen([real_python(), "-c", "pass"])
    gone.wait(timeout=CAPTURE_TIMEOUT)
    started = time.monotonic()
    [stacks] = capture_live([gone.pid], timeout=CAPTURE_TIMEOUT)
    assert stacks.error is not None and "No such process" in stacks.error, stacks.error
    assert stacks.threads == ()
    assert time.monotonic() - started < CAPTURE_TIMEOUT
    assert "capture failed" in render_text([stacks])


def test_zombie_is_an_error_without_running_gdb() -> None:
    zombie = subprocess.Popen([real_python(), "-c", "pass"])
    try:
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
        [stacks] = capture_live([zombie.pid], timeout=CAPTURE_TIMEOUT)
        assert stacks.error is not None and "zombie" in stacks.error, stacks.error
    finally:
        zombie.wait(timeout=CAPTURE_TIMEOUT)


def start_echo(script: Path) -> subprocess.Popen[bytes]:
    """Start an ECHO_PROGRAM script in its own session, with pipes to talk to it."""
    process = subprocess.Popen([real_python(), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    assert process.stdin is not None and process.stdout is not None
    return process


def test_attach_refused_by_the_kernel_is_reported(tmp_path: Path) -> None:
    """gdb exits 0 when ptrace refuses; the refusal must still come back as the error."""
    script = tmp_path / "traced.py"
    # PTRACE_TRACEME makes this test process the tracer: a second tracer (gdb) is refused.
    script.write_text("import ctypes, sys\nctypes.CDLL(None).ptrace(0, 0, 0, 0)\n" + ECHO_PROGRAM)
    process = start_echo(script)
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
        [stacks] = capture_live([process.pid], timeout=CAPTURE_TIMEOUT)
        assert stacks.error is not None and "Operation not permitted" in stacks.error, stacks.error
        assert stacks.threads == ()
    finally:
        kill_group(process)  # SIGKILL only: any other signal would stop a traced process


# Without an index cache gdb attaches after ~0.15 s and detaches after ~0.4 s here:
# the deadlines fall before gdb even starts, before the attach, while the process
# is stopped, and near the end. Whichever way each capture ends (killed at its
# deadline, or done just in time on a fast machine), the target must be left
# running and answering; the first deadline is too short for any gdb to finish.
@pytest.mark.parametrize(("deadline", "must_time_out"), [(0.01, True), (0.05, False), (0.2, False), (0.3, False)])
def test_capture_timeout_kills_gdb_and_leaves_the_process_running(tmp_path: Path, deadline: float,
                                                                  must_time_out: bool) -> None:
    script = tmp_path / "echo.py"
    script.write_text(ECHO_PROGRAM)
    process = start_echo(script)
    try:
        read_until(process.stdout.fileno(), "ready", READY_TIMEOUT)
        [stacks] = capture_live([process.pid], timeout=deadline)
        if must_time_out or stacks.error is not None:
            assert stacks.error is not None and "timed out" in stacks.error, stacks.error
        else:
            assert stacks.threads, "a capture that finished in time has the threads"
        assert_running(process.pid)
        process.stdin.write(b"still-alive\n")
        process.stdin.flush()
        read_until(process.stdout.fileno(), "still-alive", READY_TIMEOUT)
    finally:
        kill_group(process)


def core_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name == "core" or p.name.startswith("core.")]


def test_core_file_names_the_signal_and_the_crashing_frames(tmp_path: Path) -> None:
    python = real_python()
    pid, core = crash_with_core(tmp_path, CRASH_PROGRAM, python, CRASH_TIMEOUT)
    stacks = analyse_core(core, python, timeout=CAPTURE_TIMEOUT, cache_dir=tmp_path / "index-cache")
    assert stacks.error is None, stacks.error
    assert stacks.pid == pid
    assert stacks.signal is not None
    assert stacks.signal.name == "SIGSEGV" and stacks.signal.number == signal.SIGSEGV
    assert stacks.signal.address == "0x0"
    crashed = stacks.thread(stacks.signal.tid or -1)
    assert crashed is not None and crashed.tid == pid
    names = crashed.function_names()
    assert any(re.search(r"strlen", name) for name in names[:3]), names
    assert "string_at" in names
    if find_python_gdb(python) is not None:
        assert stacks.backend_label == "core+python-gdb"
        assert python_names(crashed)[-2:] == ["crash_now", "<module>"]
    assert "killed by SIGSEGV" in render_text([stacks])


def test_missing_core_file_is_an_error(tmp_path: Path) -> None:
    stacks = analyse_core(tmp_path / "no-such-core", real_python(), timeout=CAPTURE_TIMEOUT)
    assert stacks.error is not None and "core" in stacks.error
