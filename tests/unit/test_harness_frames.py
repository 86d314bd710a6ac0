"""One predicate says which Python frames are lifeguard's or the test runner's (not the program's): the
findings, the terminal and report.html all ask it."""

from __future__ import annotations

from lifeguard.child.protocol import BOOT_SCRIPT
from lifeguard.diagnose.activity import python_entry, python_text
from lifeguard.model.stacks import Frame, ThreadStack, is_harness_file, is_user_file

SITE = "/venv/lib/python3.12/site-packages"


def _py(function: str, file: str, line: int) -> Frame:
    return Frame(function, file, line, is_python=True)


def _forked_test_exit_stack(*user: Frame) -> ThreadStack:
    """A forked test's main thread as its child exits: the body returned to lifeguard's fork runner, under
    the whole pytest call chain it was forked from."""
    return ThreadStack(1, "python", frames=(
        Frame("raise", library="/lib/x86_64-linux-gnu/libc.so.6"),
        *user,
        _py("run_in_fork", f"{SITE}/lifeguard/run/fork_here.py", 62),
        _py("pytest_runtest_protocol", f"{SITE}/lifeguard/pytest_plugin/hooks.py", 80),
        _py("_multicall", f"{SITE}/pluggy/_callers.py", 103),
        _py("main", f"{SITE}/_pytest/config/__init__.py", 175),
        _py("_run_module_as_main", "<frozen runpy>", 198),
    ))


def test_a_forked_tests_exit_is_not_blamed_on_lifeguards_own_frame() -> None:
    thread = _forked_test_exit_stack()
    assert python_text(thread) is None  # no Python frame of the program: not "run_in_fork (fork_here.py:62)"
    assert python_entry(thread) == (None, None)


def test_the_programs_frame_is_found_under_the_harness() -> None:
    user = _py("test_exit", "/work/proj/tests/test_ext.py", 12)
    stdlib = _py("join", "/usr/lib/python3.12/threading.py", 1147)
    thread = _forked_test_exit_stack(stdlib, user)
    assert python_entry(thread) == (stdlib, user)
    assert python_text(thread) == "join (threading.py:1147), from test_ext.py:12"


def test_one_list_of_harness_files() -> None:
    for path in (f"{SITE}/lifeguard/child/bootstrap.py", f"{SITE}/lifeguard/run/fork_here.py",
                 f"{SITE}/_pytest/runner.py", f"{SITE}/pluggy/_hooks.py", "<frozen runpy>",
                 f"/tmp/run-1/{BOOT_SCRIPT}"):
        assert is_harness_file(path), path
        assert not is_user_file(path), path
        assert _py("f", path, 1).is_harness
    for path in ("/work/proj/bug.py", "/work/proj/tests/test_ext.py"):
        assert not is_harness_file(path) and is_user_file(path)
    for path in ("/usr/lib/python3.12/threading.py", f"{SITE}/numpy/core.py", "<frozen importlib._bootstrap>",
                 "<string>", None):
        assert not is_user_file(path), path
    assert not Frame("main", "/work/proj/lifeguard/child/x.c", 3).is_harness  # native frames are never harness
