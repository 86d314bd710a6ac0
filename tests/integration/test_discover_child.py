"""Scenario files are imported in a discovery process, never in lifeguard itself.

Whatever a file's top level does (exit, crash, fork, hang, ignore SIGTERM), lifeguard stays in charge: a
one-line usage error naming the file and line (exit 2), or a session its signals still end, and nothing the
file started survives. Each hostile file writes what it knows (its pid, its parent, what it forked) to a
mark file, a handshake the test waits on; deadlines come from the measured start-up (Pace).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path

import pytest

from lifeguard.child.protocol import DISCOVERY_TIMEOUT_ENV
from lifeguard.errors import ConfigurationError, ScenarioDefinitionError
from lifeguard.model.scenario import Scenario, take_registered
from lifeguard.plan.discover import discover
from tests.helpers import ROOT, Pace, finish_cli, pid_alive, run_cli, start_cli, wait_for

HEADER = '''import os
import lifeguard


@lifeguard.scenario(timeout=20)
def declared():
    """A scenario the file does declare."""


def mark(text):  # a handshake: the test reads what the file knew, written whole
    with open({mark!r} + ".tmp", "w") as f:
        f.write(text)
    os.replace({mark!r} + ".tmp", {mark!r})


'''


def hostile(tmp_path: Path, body: str, name: str = "hostile.py") -> tuple[Path, Path, str]:
    """A scenario file: HEADER (a valid declaration, then ``mark``) and ``body``; returns it, its mark file and
    its source."""
    mark = tmp_path / f"{name}.mark"
    source = HEADER.format(mark=str(mark)) + body
    path = tmp_path / name
    path.write_text(source)
    return path, mark, source


def line_of(source: str, needle: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if needle in line)


def marked_pids(mark: Path) -> list[int]:
    return [int(word) for word in mark.read_text().split()]


def assert_usage_error(proc, where: str, *needles: str) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, one error line naming ``where`` (file:line) and the needles, the remedy, no traceback, no run."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "runs of" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("lifeguard: error:")]
    assert len(errors) == 1, proc.stderr
    assert f"lifeguard: error: {where}:" in errors[0], errors[0]
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "keep its top level to imports and definitions" in proc.stderr
    return errors[0]


def kill_if_alive(pids: list[int]) -> None:
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_sys_exit_at_the_top_level_is_an_error_not_a_silent_success(tmp_path: Path) -> None:
    path, _, source = hostile(tmp_path, "import sys\n\n\ndef main():\n    return 0\n\n\nsys.exit(main())  # exits\n")
    proc = run_cli("run", str(path), cwd=tmp_path)
    assert_usage_error(proc, f"{path}:{line_of(source, '# exits')}", "exits at import", "sys.exit(0)")


def test_a_segfault_at_the_top_level_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path, mark, source = hostile(tmp_path, "import ctypes\n\nmark(str(os.getpid()))\nctypes.string_at(0)  # crash\n")
    proc = run_cli("run", str(path), cwd=tmp_path)
    assert_usage_error(proc, f"{path}:{line_of(source, '# crash')}", "crashes at import", "SIGSEGV")
    [discovery] = marked_pids(mark)
    assert not pid_alive(discovery)
    # It crashed in the user's folder, with core dumps off: no core file lands there.
    assert not [p.name for p in tmp_path.iterdir() if p.name == "core" or p.name.startswith("core.")]


def test_a_file_ignoring_sigterm_does_not_take_lifeguards_sigterm(tmp_path: Path, pace: Pace) -> None:
    body = f"""import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)


@lifeguard.scenario(timeout={pace.deadline(30):g})
def waits():
    mark(str(os.getpid()))
    time.sleep({pace.deadline(30) * 2:g})
"""
    path, mark, _ = hostile(tmp_path, body)
    supervisor = start_cli("run", f"{path}::waits", "--no-native", cwd=tmp_path)
    body_pid = None
    try:
        wait_for(mark.exists, "the scenario body to start", pace.deadline(20))
        [body_pid] = marked_pids(mark)
        os.kill(supervisor.pid, signal.SIGTERM)
        proc = finish_cli(supervisor, pace.deadline(20))
        assert proc.returncode == 143, proc.stdout + proc.stderr
        assert "interrupted" in proc.stdout
        wait_for(lambda: not pid_alive(body_pid), "the run's child to be gone", pace.deadline(5))
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.communicate(timeout=10)
        if body_pid:
            kill_if_alive([body_pid])


FORKS = {
    # os.fork(): the discovery process ends the copy at once, reports the fork, and lifeguard ends it all
    # on that report (so the file marks before it forks).
    "os.fork": ("mark(f'{os.getpid()} {os.getppid()}')\n"
                "pid = os.fork()  # forks\n"
                "if pid == 0:\n"
                "    import time; time.sleep(600)\n",
                "forks at import"),
    # libc's fork() runs no Python fork hook: the copy goes on, and the tree's end must kill it.
    "libc fork": ("import ctypes\n"
                  "pid = ctypes.CDLL(None).fork()\n"
                  "if pid == 0:\n"
                  "    import time; time.sleep(600)\n"
                  "mark(f'{os.getpid()} {os.getppid()} {pid}')\n",
                  "left 1 process(es) running"),
    # A process in a session of its own is outside the discovery's session and group: its mark finds it.
    "setsid": ("import subprocess, sys\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
               "start_new_session=True)\n"
               "mark(f'{os.getpid()} {os.getppid()} {child.pid}')\n",
               "left 1 process(es) running"),
}


def in_session(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a forked copy stays in its parent's session, orphaned or not)."""
    members = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:  # not a process, or gone
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


@pytest.mark.parametrize("how", sorted(FORKS))
def test_a_process_forked_at_import_does_not_survive(tmp_path: Path, pace: Pace, how: str) -> None:
    body, needle = FORKS[how]
    path, mark, source = hostile(tmp_path, body)
    supervisor = start_cli("list", str(path), cwd=tmp_path)
    proc = finish_cli(supervisor, pace.deadline(60))
    discovery, parent, *forked = marked_pids(mark)
    try:
        # The file ran in a child of lifeguard (the discovery process, in a session of its own), never in
        # lifeguard itself.
        assert parent == supervisor.pid and discovery != supervisor.pid
        where = f"{path}:{line_of(source, '# forks')}" if how == "os.fork" else str(path)
        assert_usage_error(proc, where, needle)
        wait_for(lambda: not in_session(discovery) and not any(map(pid_alive, [discovery, *forked])),
                 "the discovery's tree to be gone", pace.deadline(5))
    finally:
        kill_if_alive([*in_session(discovery), *forked])


def test_a_top_level_that_never_returns_hits_the_discovery_deadline(tmp_path: Path, pace: Pace) -> None:
    path, mark, source = hostile(tmp_path, "mark(str(os.getpid()))\nwhile True:  # loops\n    pass\n")
    deadline = pace.deadline(2)
    started = time.monotonic()
    proc = run_cli("run", str(path), cwd=tmp_path, env={DISCOVERY_TIMEOUT_ENV: f"{deadline:g}"},
                   timeout=deadline + pace.deadline(30))
    took = time.monotonic() - started
    [discovery] = marked_pids(mark)
    try:
        assert not pid_alive(discovery)
        line = line_of(source, "# loops")
        assert_usage_error(proc, f"{path}", "still loading after", "discovery deadline", DISCOVERY_TIMEOUT_ENV)
        # faulthandler's dump shows the loop at its `while` or its body.
        assert f"{path}:{line}:" in proc.stderr or f"{path}:{line + 1}:" in proc.stderr, proc.stderr
        assert took >= deadline
    finally:
        kill_if_alive([discovery])


def test_sigterm_while_a_file_hangs_at_import_ends_the_discovery(tmp_path: Path, pace: Pace) -> None:
    path, mark, _ = hostile(tmp_path, "mark(str(os.getpid()))\nwhile True:\n    pass\n")
    supervisor = start_cli("run", str(path), cwd=tmp_path, env={DISCOVERY_TIMEOUT_ENV: "600"})
    discovery = None
    try:
        wait_for(mark.exists, "the file's import to start", pace.deadline(20))
        [discovery] = marked_pids(mark)
        os.kill(supervisor.pid, signal.SIGTERM)
        proc = finish_cli(supervisor, pace.deadline(20))
        assert proc.returncode == 143, proc.stdout + proc.stderr
        assert not pid_alive(discovery)  # ended before lifeguard exited
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.communicate(timeout=10)
        if discovery:
            kill_if_alive([discovery])


def test_a_killed_lifeguard_takes_the_discovery_with_it(tmp_path: Path, pace: Pace) -> None:
    """SIGKILL leaves lifeguard no cleanup: the kernel ends the discovery process of a file stuck at import."""
    path, mark, _ = hostile(tmp_path, "mark(str(os.getpid()))\nwhile True:\n    pass\n")
    supervisor = start_cli("list", str(path), cwd=tmp_path, env={DISCOVERY_TIMEOUT_ENV: "600"})
    discovery = None
    try:
        wait_for(mark.exists, "the file's import to start", pace.deadline(20))
        [discovery] = marked_pids(mark)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.communicate(timeout=pace.deadline(5))
        wait_for(lambda: not pid_alive(discovery), "the discovery process to die with lifeguard", pace.deadline(5))
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.communicate(timeout=10)
        if discovery:
            kill_if_alive([discovery])


NO_SCENARIO = {
    "dead branch": "import lifeguard\n\nif False:\n    @lifeguard.scenario()\n    def never():\n        pass\n",
    "no parentheses": "import lifeguard\n\n\n@lifeguard.scenario\ndef bare():\n    pass\n",
    "imports lifeguard only": "import lifeguard\nx = 1\n",
}


@pytest.mark.parametrize("case", sorted(NO_SCENARIO))
def test_a_scenario_file_that_declares_nothing_is_an_error(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    path = folder / "empty_scenarios.py"
    path.write_text(NO_SCENARIO[case])
    proc = run_cli("run", str(path), cwd=tmp_path)
    assert_usage_error(proc, str(path), "declares no scenario", f"lifeguard run -- python {path}")
    if "@lifeguard.scenario" in NO_SCENARIO[case]:  # in a folder too: never skipped in silence
        assert_usage_error(run_cli("list", str(folder), cwd=tmp_path), str(path), "declares no scenario")
    else:  # in a folder, a module that only imports lifeguard is a helper of its scenario files
        (folder / "real.py").write_text("import lifeguard\n\n\n@lifeguard.scenario()\ndef real():\n    pass\n")
        listed = run_cli("list", str(folder), cwd=tmp_path)
        assert listed.returncode == 0 and "real  [default: passed]" in listed.stdout, listed.stdout + listed.stderr


def test_a_body_a_run_cannot_find_is_an_error(tmp_path: Path) -> None:
    source = "import lifeguard\n\n\ndef make():\n    @lifeguard.scenario()  # nested\n    def inner():\n" \
             "        pass\n\n\nmake()\n"
    path = tmp_path / "nested.py"
    path.write_text(source)
    proc = run_cli("list", str(path), cwd=tmp_path)
    assert_usage_error(proc, f"{path}:{line_of(source, '# nested')}", "'inner' is not a top-level name")


def test_the_first_error_in_load_order_wins(tmp_path: Path) -> None:
    """A bad definition in the first file is reported, not the crash of the second that follows it."""
    folder = tmp_path / "cases"
    folder.mkdir()
    first = folder / "a_bad.py"
    first.write_text("import lifeguard\n\n\n@lifeguard.scenario(repeat=0)\ndef f():\n    pass\n")
    (folder / "b_crash.py").write_text("import ctypes\nimport lifeguard\n\n\n@lifeguard.scenario()\n"
                                       "def g():\n    pass\n\n\nctypes.string_at(0)\n")
    proc = run_cli("list", str(folder), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"lifeguard: error: {first}:4: repeat: 0 must be at least 1" in proc.stderr


def test_one_discovery_process_loads_every_file(tmp_path: Path) -> None:
    for name in ("one.py", "two.py", "three.py"):
        path, _, _ = hostile(tmp_path, "mark(f'{os.getpid()} {os.getppid()}')\n", name)
        path.write_text(path.read_text().replace("def declared():", f"def declared_in_{path.stem}():"))
    supervisor = start_cli("list", str(tmp_path), cwd=tmp_path)
    proc = finish_cli(supervisor)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pids = {tuple(marked_pids(tmp_path / f"{name}.mark")) for name in ("one.py", "two.py", "three.py")}
    [(discovery, parent)] = pids
    assert parent == supervisor.pid and discovery != supervisor.pid
    assert all(f"declared_in_{stem}  [default: passed]" in proc.stdout for stem in ("one", "two", "three"))


def imported_here(path: Path) -> list[Scenario]:
    """The scenarios of ``path`` as the real decorator records them, imported in this (test) process: what
    lifeguard saw when it imported scenario files itself."""
    take_registered()
    spec = importlib.util.spec_from_file_location(f"imported_here_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return take_registered()


VERSIONED = '''import lifeguard


@lifeguard.scenario("tiny", expect={"buggy": {"<3.12": "crashed@exit", ">=3.12": "hung@exit"}, "fixed": "passed"},
                    repeat={"buggy": 3, "*": 2}, timeout=7.5, name="renamed", tags=("slow", "fork"),
                    fork_server=True)
def versioned(fx):
    """First paragraph
    on two lines.

    Second paragraph."""


@lifeguard.scenario(expect={"default": "sometimes:corrupted@run"})
def plain_one():
    pass
'''


def test_discovery_gives_the_scenarios_the_decorator_records(tmp_path: Path) -> None:
    versioned = tmp_path / "versioned.py"
    versioned.write_text(VERSIONED)
    files = sorted((ROOT / "scenarios").glob("*.py")) + [versioned]
    assert len(files) >= 4
    found = discover([str(path) for path in files])
    assert found == [item for path in files for item in imported_here(path.resolve())]
    assert {item.name for item in found} >= {"pool_outlives_interpreter", "fork_with_pending_callback", "renamed"}


def test_list_shows_the_bundled_scenarios_where_they_are_declared() -> None:
    proc = run_cli("list", str(ROOT / "scenarios"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in sorted((ROOT / "scenarios").glob("*.py")):
        for item in imported_here(path.resolve()):
            source = path.read_text().splitlines()
            assert source[item.line - 1].lstrip().startswith("@lifeguard.scenario")
            assert f"{item.name} fixture={item.fixture}" in proc.stdout
            assert f"({path.resolve()}:{item.line})" in proc.stdout


BAD_DEFINITIONS = {
    "async body": "@lifeguard.scenario()\nasync def body():\n    pass\n",
    "generator body": "@lifeguard.scenario()\ndef body():\n    yield\n",
    "repeat 0": "@lifeguard.scenario(repeat=0)\ndef body():\n    pass\n",
    "unknown outcome": "@lifeguard.scenario(expect={'default': 'exploded'})\ndef body():\n    pass\n",
    "a timeout that is no number": "import decimal\n\n\n@lifeguard.scenario(timeout=decimal.Decimal(5))\n"
                                   "def body():\n    pass\n",
    "a version key": "@lifeguard.scenario(expect={'default': {'>=x': 'passed'}})\ndef body():\n    pass\n",
}


@pytest.mark.parametrize("case", sorted(BAD_DEFINITIONS))
def test_a_bad_definition_gets_the_decorators_own_message(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text("import lifeguard\n\n\n" + BAD_DEFINITIONS[case])
    with pytest.raises(ScenarioDefinitionError) as in_process:
        imported_here(path.resolve())
    with pytest.raises(ConfigurationError) as discovered:
        discover([str(path)])
    assert str(discovered.value) == str(in_process.value)
