"""The faulthandler dump parser and its merge into native stacks, on literal dumps as faulthandler writes them."""

from __future__ import annotations

import pytest

from lifeguard.capture.faulthandler import (
    UNKNOWN_THREAD,
    insert_python_frames,
    merge_faulthandler,
    parse_faulthandler,
)
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

FAULTHANDLER_DUMP = """\
Fatal Python error: Segmentation fault

Thread 0x00007f0000000002 (most recent call first):
  File "/work/worker.py", line 12 in callback
  File "/work/worker.py", line 30 in run
  File "???", line ??? in <lambda>

Current thread 0x00007f0000000001 (most recent call first):
  File "/work/main.py", line 5 in main
  File "/work/main.py", line 9 in <module>

Extension modules: fixture (total: 1)
"""

# A dump with all_threads=False, inside a stderr tail, with the lines faulthandler writes for a thread
# with no Python frame and for a collection in progress.
SINGLE_STACK_IN_STDERR = """\
Traceback (most recent call last):
  File "/work/ignored.py", line 1 in not_a_dump_frame
Fatal Python error: Aborted

Stack (most recent call first):
  Garbage-collecting
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/work/app.py", line 44 in drain
  ...
Thread 0x00007f00000000aa (most recent call first):
  <no Python frame>
"""


def native(*names: str) -> tuple[Frame, ...]:
    return tuple(Frame(function=name, address=hex(0x1000 + i)) for i, name in enumerate(names))


def python_names(thread: ThreadStack) -> list[str]:
    return [f.function or "" for f in thread.python_frames]


def test_parse_faulthandler_dump() -> None:
    stacks = parse_faulthandler(FAULTHANDLER_DUMP)
    assert list(stacks) == [0x7F0000000002, 0x7F0000000001]
    worker = stacks[0x7F0000000002]
    assert [(f.function, f.file, f.line) for f in worker] == [
        ("callback", "/work/worker.py", 12),
        ("run", "/work/worker.py", 30),
        ("<lambda>", None, None),
    ]
    assert all(f.is_python for f in worker)
    assert [f.function for f in stacks[0x7F0000000001]] == ["main", "<module>"]


def test_a_dump_without_thread_ids_inside_stderr() -> None:
    stacks = parse_faulthandler(SINGLE_STACK_IN_STDERR)
    # The traceback before the dump is not a thread's block; the thread without Python frames has none.
    assert list(stacks) == [UNKNOWN_THREAD, 0x7F00000000AA]
    assert [(f.function, f.line) for f in stacks[UNKNOWN_THREAD]] == [("wait", 320), ("drain", 44)]
    assert stacks[0x7F00000000AA] == []


def test_a_thread_dumped_twice_keeps_its_last_stack() -> None:
    first = 'Thread 0x0000000000000007 (most recent call first):\n  File "a.py", line 1 in before\n'
    second = 'Thread 0x0000000000000007 (most recent call first):\n  File "a.py", line 2 in after\n'
    assert [f.function for f in parse_faulthandler(first + "\n" + second)[7]] == ["after"]


def test_text_without_a_dump_gives_nothing() -> None:
    assert parse_faulthandler("") == {}
    assert parse_faulthandler('  File "x.py", line 3 in f\nSegmentation fault\n') == {}


def test_python_frames_go_before_eval_frames() -> None:
    python = list(parse_faulthandler(FAULTHANDLER_DUMP)[0x7F0000000002])
    stack = native(
        "futex_wait",
        "callback_trampoline",
        "_PyEval_EvalFrameDefault",
        "ffi_call",
        "_PyEval_EvalFrameDefault",
        "start_thread",
    )
    merged = insert_python_frames(stack, python)
    assert [f.function for f in merged] == [
        "futex_wait",
        "callback_trampoline",
        "callback",
        "_PyEval_EvalFrameDefault",
        "ffi_call",
        "run",
        "<lambda>",
        "_PyEval_EvalFrameDefault",
        "start_thread",
    ]
    # Without an eval frame symbol the Python frames are kept, outermost.
    assert [f.function for f in insert_python_frames(native("a", "b"), python[:1])] == ["a", "b", "callback"]


def test_fewer_python_frames_than_eval_frames_fill_from_the_innermost() -> None:
    stack = native("_PyEval_EvalFrameDefault", "ffi_call", "_PyEval_EvalFrameDefault")
    merged = insert_python_frames(stack, [Frame("only", "a.py", 1, is_python=True)])
    assert [f.function for f in merged] == ["only", "_PyEval_EvalFrameDefault", "ffi_call", "_PyEval_EvalFrameDefault"]
    assert insert_python_frames(stack, []) == stack


def test_merge_leaves_threads_without_a_dump_alone() -> None:
    threads = (
        ThreadStack(tid=1, frames=native("poll", "_PyEval_EvalFrameDefault", "main"), pthread_id=0x7F0000000001),
        ThreadStack(tid=2, frames=native("futex_wait", "start_thread"), pthread_id=0x7F00000000FF),
    )
    process = ProcessStacks(pid=1, threads=threads)
    merged = merge_faulthandler(process, FAULTHANDLER_DUMP)
    assert merged.backend_label == "gdb+faulthandler"
    assert python_names(merged.threads[0]) == ["main", "<module>"]
    assert merged.threads[1] == threads[1]
    assert merge_faulthandler(process, "no dump here") is process


def test_merge_uses_a_dump_without_thread_ids_for_a_single_thread_only() -> None:
    single = ProcessStacks(pid=1, threads=(ThreadStack(tid=1, frames=native("_PyEval_EvalFrameDefault")),))
    merged = merge_faulthandler(single, SINGLE_STACK_IN_STDERR)
    assert python_names(merged.threads[0]) == ["wait", "drain"]
    two = ProcessStacks(pid=1, threads=(ThreadStack(tid=1, frames=native("_PyEval_EvalFrameDefault")),
                                        ThreadStack(tid=2, frames=native("_PyEval_EvalFrameDefault"))))
    assert merge_faulthandler(two, SINGLE_STACK_IN_STDERR) is two


def test_merge_keeps_python_frames_python_gdb_found() -> None:
    own = (Frame("from_python_gdb", "b.py", 3, is_python=True),) + native("_PyEval_EvalFrameDefault")
    process = ProcessStacks(pid=1, threads=(ThreadStack(tid=1, frames=own, pthread_id=0x7F0000000001),))
    assert merge_faulthandler(process, FAULTHANDLER_DUMP) is process


@pytest.mark.parametrize("line", ['  File "x.py", line 3 in f', "Current thread 0x1 (most recent call first):"])
def test_frame_and_header_lines_parse_alone(line: str) -> None:
    text = "Thread 0x0000000000000001 (most recent call first):\n" + line + "\n"
    stacks = parse_faulthandler(text)
    assert list(stacks) == [1]
    assert len(stacks[1]) == (1 if line.startswith("  File") else 0)


def test_a_header_that_names_its_thread_parses() -> None:
    # CPython 3.14 names the thread between its id and the rest of the header.
    dump = ('Thread 0x00007f3d577fe6c0 [Thread-3 (hold_] (most recent call first):\n'
            '  File "a.py", line 4 in hold\n'
            '\n'
            'Current thread 0x00007f066a259200 [python] (most recent call first):\n'
            '  File "a.py", line 9 in <module>\n')
    stacks = parse_faulthandler(dump)
    assert [f.function for f in stacks[0x00007F3D577FE6C0]] == ["hold"]
    assert [f.function for f in stacks[0x00007F066A259200]] == ["<module>"]
