"""Python frames from a faulthandler dump, merged into native stacks captured by gdb.

The fallback when the interpreter's python-gdb extension is not available: the
supervisor already asks the child for a faulthandler dump on timeout, and that dump
names each thread by its pthread_t ("Thread 0x00007f..."), which gdb reports as the
thread handle, so the two line up thread by thread.
"""

from __future__ import annotations

import dataclasses
import re

from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack

# "Current thread 0x00007f1c2a3b4740 (most recent call first):", "Thread 0x... (...)", from 3.14 with the
# thread's name ("Thread 0x... [Thread-3 (hold_] (most recent call first):"), or "Stack (most recent call
# first):" when dumped with all_threads=False.
_THREAD_HEADER = re.compile(
    r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[.*\])?(?: \(most recent call first\))?:\s*$")
_STACK_HEADER = re.compile(r"^Stack \(most recent call first\):\s*$")
# '  File "x.py", line 3 in f'; faulthandler writes "???" for an unknown line or file.
_FILE_LINE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<function>.*?)\s*$')

UNKNOWN_THREAD = -1  # key for a dump without thread ids ("Stack (most recent call first):")


def parse_faulthandler(text: str) -> dict[int, list[Frame]]:
    """Python frames per thread (pthread_t, or UNKNOWN_THREAD), innermost first.

    Lines that are not headers or frames ("Fatal Python error", "  <no Python
    frame>", "  ...", "  Garbage-collecting") are skipped, so a dump embedded in a
    stderr tail parses too. A thread that appears twice (two dumps) keeps the last.
    """
    stacks: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        header = _THREAD_HEADER.match(line)
        if header:
            current = stacks[int(header.group(1), 16)] = []
            continue
        if _STACK_HEADER.match(line):
            current = stacks[UNKNOWN_THREAD] = []
            continue
        frame = _FILE_LINE.match(line)
        if frame and current is not None:
            line_text = frame.group("line")
            file = frame.group("file")
            current.append(
                Frame(
                    function=frame.group("function"),
                    file=None if file == "???" else file,
                    line=None if line_text == "???" else int(line_text),
                    is_python=True,
                )
            )
        elif line and not line[0].isspace():
            current = None  # any other unindented line ends a thread's block
    return stacks


def insert_python_frames(native: tuple[Frame, ...], python: list[Frame]) -> tuple[Frame, ...]:
    """Place Python frames (innermost first) before the eval frames that run them.

    Python <= 3.10 runs one Python frame per ``_PyEval_EvalFrameDefault`` call, so
    the frames pair up one to one. From 3.11 Python-to-Python calls stay inside one
    eval frame and a dump does not say where one call ends, so: one Python frame per
    eval frame from the innermost outwards, and whatever is left goes to the
    outermost eval frame. That is exact when native code calls back into Python
    once at the top of a stack (a callback, a thread body), the common shape of
    the incidents (MXNet's atfork callback, TVM's destructor run by gc).
    """
    eval_positions = [i for i, f in enumerate(native) if f.is_eval_frame]
    if not python:
        return native
    if not eval_positions:
        # No symbol for the eval loop: keep the Python frames, outermost, rather than lose them.
        return native + tuple(python)
    shares = [1] * len(eval_positions)
    if len(python) > len(eval_positions):
        shares[-1] += len(python) - len(eval_positions)
    merged: list[Frame] = []
    remaining = list(python)
    start = 0
    for position, share in zip(eval_positions, shares, strict=True):
        merged.extend(native[start:position])
        merged.extend(remaining[:share])
        del remaining[:share]
        start = position
    merged.extend(native[start:])
    return tuple(merged)


def merge_faulthandler(process: ProcessStacks, faulthandler_text: str) -> ProcessStacks:
    """Attach the Python frames of a faulthandler dump to the matching native threads.

    Threads that already have Python frames (python-gdb worked) are left as they
    are. A dump without thread ids is used only for a single-thread process.
    """
    dump = parse_faulthandler(faulthandler_text)
    if not dump or not process.threads:
        return process
    merged_any = False
    threads: list[ThreadStack] = []
    for thread in process.threads:
        python = dump.get(thread.pthread_id) if thread.pthread_id is not None else None
        if python is None and len(process.threads) == 1:
            python = dump.get(UNKNOWN_THREAD)
        if python and not thread.python_frames:
            thread = dataclasses.replace(thread, frames=insert_python_frames(thread.frames, python))
            merged_any = True
        threads.append(thread)
    if not merged_any:
        return process
    return dataclasses.replace(process, threads=tuple(threads), faulthandler=True)
