"""Native stacks as data: the GIL inference, the text rendering and the JSON round trip."""

from __future__ import annotations

import json

import pytest

from lifeguard.model.stacks import (
    GIL_HELD,
    GIL_RELEASED,
    GIL_WAITING,
    Frame,
    ProcessStacks,
    ThreadStack,
    infer_gil,
    render_text,
)


def native(*names: str) -> tuple[Frame, ...]:
    return tuple(Frame(function=name, address=hex(0x1000 + i)) for i, name in enumerate(names))


@pytest.mark.parametrize(
    ("functions", "locked", "holder", "expected"),
    [
        (("futex_wait", "take_gil", "PyEval_RestoreThread"), True, 0x10, GIL_WAITING),
        (("futex_wait", "PyGILState_Ensure", "callback"), None, None, GIL_WAITING),
        (("wait4", "system", "ffi_call"), True, 0x10, GIL_HELD),
        (("wait4", "system", "ffi_call"), True, 0x20, GIL_RELEASED),
        (("wait4", "system", "ffi_call"), False, 0x10, GIL_RELEASED),
        (("wait4", "system", "ffi_call"), None, None, None),
        (("wait4", "system", "ffi_call"), True, None, None),
    ],
)
def test_infer_gil(functions: tuple[str, ...], locked: bool | None, holder: int | None, expected: str | None) -> None:
    assert infer_gil(native(*functions), 0x10, locked, holder) == expected


def test_render_marks_python_frames() -> None:
    frames = native("futex_wait", "_PyEval_EvalFrameDefault")
    frames = (frames[0], Frame("main", "/work/main.py", 5, is_python=True), frames[1])
    process = ProcessStacks(
        pid=7, ppid=1, cmdline=("python", "main.py"), threads=(ThreadStack(7, "python", GIL_HELD, frames),)
    )
    text = render_text([process])
    assert text.splitlines() == [
        "Process 7 (parent 1): python main.py  [gdb]",
        '  Thread 7 "python" GIL held',
        "    #0   0x1000 futex_wait",
        "        py  main (/work/main.py:5)",
        "    #1   0x1001 _PyEval_EvalFrameDefault",
    ]
    assert ProcessStacks.from_dict(process.to_dict()) == process


def test_a_failed_capture_renders_its_error_and_round_trips() -> None:
    failed = ProcessStacks(pid=9, error="attach failed: No such process")
    assert "capture failed" in render_text([failed]) and "No such process" in render_text([failed])
    assert ProcessStacks.from_dict(json.loads(json.dumps(failed.to_dict()))) == failed


def test_python_frames_and_function_names_of_a_thread() -> None:
    frames = (Frame("callback", "w.py", 3, is_python=True),) + native("_PyEval_EvalFrameDefault", "start_thread")
    thread = ThreadStack(tid=3, frames=frames)
    assert [f.function for f in thread.python_frames] == ["callback"]
    assert thread.function_names() == ["_PyEval_EvalFrameDefault", "start_thread"]  # native frames only
    assert frames[1].is_eval_frame and not frames[2].is_eval_frame
    process = ProcessStacks(pid=3, threads=(thread,))
    assert process.thread(3) is thread and process.thread(4) is None


def test_every_report_heads_a_thread_alike() -> None:
    """One title (tid, name, GIL, the kernel's word): the terminal's stacks, its evidence view and
    report.html each add only their own mark for the signalled thread."""
    from lifeguard.diagnose.view import _thread_title as view_title
    from lifeguard.model.kernel import KernelState
    from lifeguard.report.html_evidence import _thread_title as page_title

    thread = ThreadStack(7, "python", gil="held", pthread_id=0xAB,
                         kernel=KernelState("S", "S", "futex", "futex_wait_queue", 0.0, 0.2))
    title = thread.title()
    assert title.startswith('Thread 7 "python" GIL held, ') and "futex" in title
    assert thread.title(pthread=True) == title.replace('"python"', '"python" (pthread 0xab)')
    process = ProcessStacks(pid=1, threads=(thread,))
    assert f"  {thread.title(pthread=True)}\n" in render_text([process])
    assert view_title(thread, None) == title
    assert page_title(thread, process) == title


def test_a_compilers_part_or_clone_counts_as_its_function() -> None:
    # Distribution builds of CPython 3.14 show these in native stacks.
    from lifeguard.diagnose.evidence import is_waiting, matches
    from lifeguard.model.stacks import GIL_WAITING, base_function, infer_gil

    assert base_function("_PyEval_EvalFrameDefault.cold") == "_PyEval_EvalFrameDefault"
    assert base_function("take_gil.lto_priv.0") == "take_gil"
    assert base_function("drop_gil.constprop.0.isra.0") == "drop_gil"
    assert base_function("ns::f(int) const") == "ns::f(int) const"
    assert Frame(function="_PyEval_EvalFrameDefault.cold").is_eval_frame
    assert matches("take_gil.lto_priv.0", ("take_gil",))
    assert infer_gil([Frame(function="take_gil.lto_priv.0")], None, None, None) == GIL_WAITING
    assert is_waiting(Frame(function="__new_sem_wait_slow64.constprop.0"))
