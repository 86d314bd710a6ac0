"""Runs in a child of the supervisor's interpreter (lifeguard.capture.pystack_backend), never imported.

pystack's reader is native code: a read of a damaged or shutting-down interpreter could
loop or crash, and only a separate process can be killed at a deadline without taking the
supervisor along. So the supervisor runs this file (with ``runpy``, so its folder, which
holds modules named like the standard library's, never lands on ``sys.path``) and reads
one JSON document from stdout:

    python -c "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')" \\
        pystack_script.py live PID
    ... pystack_script.py core CORE EXECUTABLE

It prints pystack's data as it comes, raw: frame merging, GIL states and library names
are decided by lifeguard.capture.pystack_parse, where they are typed and unit-tested.
Only the standard library and pystack: nothing from lifeguard.
"""

from __future__ import annotations

import bisect
import json
import sys
from typing import Any

import pystack
from pystack.engine import (
    CoreFileAnalyzer,
    NativeReportingMode,
    get_process_threads,
    get_process_threads_for_core,
)
from pystack.types import NativeFrame, PyThread, frame_type

USAGE = "usage: pystack_script.py version | live PID | core CORE EXECUTABLE"


Libraries = list[tuple[int, int, str]]  # (start, end, path) of the file-backed maps, sorted


def library_of(address: int, libraries: Libraries, fallback: str) -> str:
    """The path of the shared object mapped at ``address``: a core's frames name only its file name."""
    index = bisect.bisect_right(libraries, (address, float("inf"), "")) - 1
    if index >= 0 and libraries[index][0] <= address < libraries[index][1]:
        return libraries[index][2]
    return fallback


def native_record(frame: NativeFrame, python_version: tuple[int, int] | None,
                  libraries: Libraries) -> dict[str, Any]:
    return {
        "address": frame.address,
        "symbol": frame.symbol,
        "path": frame.path,
        "line": frame.linenumber,
        "library": library_of(frame.address, libraries, frame.library) if libraries else frame.library,
        # pystack's own, version-specific notion of "the frame that runs Python frames".
        "eval": frame_type(frame, python_version) is NativeFrame.FrameType.EVAL,
    }


def thread_record(thread: PyThread, libraries: Libraries) -> dict[str, Any]:
    python = []
    for frame in thread.all_frames:  # outermost first, shims included: they mark eval entries
        python.append(
            {
                "function": frame.code.scope,
                "file": frame.code.filename,
                "line": frame.code.location.lineno,
                "entry": frame.is_entry,
                "shim": frame.is_shim,
            }
        )
    version = thread.python_version
    return {
        "tid": thread.tid,
        "name": getattr(thread, "name", None),
        "holds_the_gil": thread.holds_the_gil,
        "gc_collecting": thread.is_gc_collecting,
        "python_version": list(version) if version else None,
        "interpreter_id": getattr(thread, "interpreter_id", None),
        "native": [native_record(frame, version, libraries) for frame in thread.native_frames],  # outermost first
        "python": python,
    }


def live(pid: int) -> dict[str, Any]:
    threads = get_process_threads(pid, stop_process=True, native_mode=NativeReportingMode.ALL)
    return {"threads": [thread_record(thread, []) for thread in threads]}


def core(core_file: str, executable: str) -> dict[str, Any]:
    analyzer = CoreFileAnalyzer(core_file, executable)
    facts: dict[str, Any] = {"pid": analyzer.extract_pid()}
    for key, extract in (("failure", analyzer.extract_failure_info), ("psinfo", analyzer.extract_ps_info)):
        try:
            facts[key] = extract()
        except Exception as error:  # a missing note costs that fact only
            facts[key] = None
            facts.setdefault("problems", []).append(f"{key}: {error}")
    try:
        facts["missing_modules"] = sorted(str(path) for path in analyzer.missing_modules())
    except Exception:
        facts["missing_modules"] = []
    libraries: Libraries = []
    try:
        libraries = sorted((m.start, m.end, str(m.path)) for m in analyzer.extract_maps()
                           if m.path is not None and str(m.path).startswith("/"))
    except Exception as error:
        facts.setdefault("problems", []).append(f"maps: {error}")
    threads = get_process_threads_for_core(core_file, executable, native_mode=NativeReportingMode.ALL)
    facts["threads"] = [thread_record(thread, libraries) for thread in threads]
    return facts


def main(argv: list[str]) -> int:
    result: dict[str, Any]
    try:
        if argv == ["version"]:
            result = {}
        elif len(argv) == 2 and argv[0] == "live":
            result = live(int(argv[1]))
        elif len(argv) == 3 and argv[0] == "core":
            result = core(argv[1], argv[2])
        else:
            print(USAGE, file=sys.stderr)
            return 64
    except Exception as error:  # pystack's errors are data for the supervisor
        result = {"error": {"type": type(error).__name__, "message": str(error)}}
    result["pystack"] = getattr(pystack, "__version__", None)  # importlib.metadata would cost 20 ms
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    return 0


if __name__ == "__main__":
    # sys.argv under "python -c CODE SCRIPT ARGS...": ["-c", SCRIPT, ARGS...] (runpy swaps "-c" for SCRIPT).
    raise SystemExit(main(sys.argv[2:]))
