"""The phase a main thread's stack is in, read off real stack shapes (innermost first)."""

from __future__ import annotations

import ast
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.diagnose.stack_phase import stack_phase
from lifeguard.model.outcomes import Phase
from lifeguard.model.stacks import Frame

CHILD = Path(__file__).resolve().parents[2] / "lifeguard" / "child"
CACHED_CHILD = "/root/.cache/lifeguard/childpath/087c7dfb/lifeguard/child"


def native(*names: str) -> list[Frame]:
    return [Frame(function=name) for name in names]


def python(file: str, function: str) -> Frame:
    return Frame(function=function, file=file, line=1, is_python=True)


def test_a_static_destructor_under_the_c_librarys_exit_is_in_exit() -> None:
    frames = native("raise", "tupledealloc", "std::unique_ptr<_object>::~unique_ptr", "__run_exit_handlers",
                    "exit", "__libc_start_call_main")
    assert stack_phase(frames) is Phase.EXIT


def test_a_crash_in_an_atexit_callback_of_a_forked_test_is_in_exit() -> None:
    frames = [python("/tmp/test_x.py", "cleanup"), *native("_PyEval_EvalFrameDefault", "atexit_callfuncs"),
              python(f"{CACHED_CHILD}/forked_test.py", "_exit_as_a_process"),
              python(f"{CACHED_CHILD}/forked_test.py", "become_run")]
    assert stack_phase(frames) is Phase.EXIT


def test_faulthandlers_stack_of_a_crash_in_the_body_is_in_the_body() -> None:
    frames = [python("/usr/lib/python3.11/ctypes/__init__.py", "string_at"), python("/tmp/forge.py", "<module>"),
              python(f"{CACHED_CHILD}/plain.py", "body"), python(f"{CACHED_CHILD}/bootstrap.py", "_run_body"),
              python(f"{CACHED_CHILD}/bootstrap.py", "run"), python("<string>", "<module>")]
    assert stack_phase(frames) is Phase.RUN


def test_a_native_stack_running_the_program_and_no_exit_is_not_in_exit() -> None:
    frames = native("do_crash", "_PyEval_EvalFrameDefault", "PyRun_SimpleStringFlags", "pymain_run_command",
                    "pymain_run_python", "Py_RunMain", "main")
    assert stack_phase(frames) is Phase.RUN


def test_a_program_frame_named_like_ours_outside_lifeguard_says_nothing() -> None:
    assert stack_phase([python("/home/me/project/_run_body.py", "_run_body")]) is None
    assert stack_phase(native("worker_loop", "start_thread", "clone3")) is None


def test_the_frame_names_are_the_child_functions_they_name() -> None:
    defined = {node.name for path in CHILD.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.FunctionDef)}
    assert set(protocol.BODY_FRAMES + protocol.EXIT_FRAMES) <= defined
