"""The typed evidence model survives its JSON form: ``from_dict(to_dict(x)) == x``."""

from __future__ import annotations

import json

from lifeguard.model.kernel import KernelState
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Corruption, Event, Finding, Leftover, RunResult, StderrLine, ThreadRef
from lifeguard.model.run import StartMode
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import Backend, Frame, ProcessStacks, ThreadStack


def full_result() -> RunResult:
    frames = (Frame("take_gil", "ceval_gil.c", 331, "/usr/lib/libpython3.11.so", "0x7f00"),
              Frame("worker", "pool.py", 12, is_python=True),
              Frame("_PyEval_EvalFrameDefault", None, None, None, "0x7f10", inline=True))
    process = ProcessStacks(pid=41, ppid=40, exe="/usr/bin/python3", cmdline=("python3", "-c", "x"),
                            backend=Backend.CORE, python_gdb=True, faulthandler=True,
                            threads=(ThreadStack(tid=41, name="python3", gil="waiting", frames=frames,
                                                 pthread_id=0x7F0001,
                                                 kernel=KernelState("S", "S", "futex", "futex_wait_queue", 0.0,
                                                                    0.3, (2, 0, 41))),),
                            signal=SignalInfo("SIGSEGV", 11, 1, "0x10", 41), notes=("no debug info",), duration=0.25)
    return RunResult(
        scenario="s", variant="buggy", index=3, outcome=Outcome.CRASHED, phase=Phase.EXIT, expected="crashed@exit",
        signal=11, exit_code=-11, duration=0.5, python="3.11.7", run_dir="/tmp/r", reason="killed by SIGSEGV",
        fatal_error=None, corruption=(Corruption(41, "bad frame", "00ff", 2),),
        leftover_processes=(Leftover(44, "sleep", 1),), evidence={"stderr.txt": "/tmp/r/stderr.txt"},
        stdout_tail="out", stderr_tail="err", python_stacks={"41": "Thread 0x1 ..."}, backtraces=(process,),
        findings=(Finding("static-destructor-after-finalize", "a static pool released objects", "unregister",
                          threads=(ThreadRef(41, 41, "python3", "crashed"),), frames=("~Pool at pool.cpp:9",),
                          details={"library": "pool.so"}, evidence=("stderr line 3",)),),
        events=(Event("forked", 42, 1.5, {"parent": 41}), Event("gc-foreign-thread", 41, 1.6, {"thread": 7})),
        notes=("gdb slow",), seed=7, perturbations=("gc-thread",), mode=StartMode.FORK_FULL, finished_at=2.0,
        replay="lifeguard run s --seed 7",
        stderr_messages=(StderrLine(3, "terminate called without an active exception"),),
    )


def test_run_result_round_trips_through_json() -> None:
    result = full_result()
    data = json.loads(json.dumps(result.to_dict()))
    assert RunResult.from_dict(data) == result


def test_the_json_form_keeps_the_documented_shape() -> None:
    data = full_result().to_dict()
    assert data["outcome"] == "crashed" and data["phase"] == "exit" and data["signal_name"] == "SIGSEGV"
    assert data["mode"] == "fork-server/full"
    process = data["backtraces"][0]
    assert process["backend"] == "core+python-gdb+faulthandler"
    assert "Process 41" in process["text"]
    assert data["events"][0] == {"event": "forked", "pid": 42, "time": 1.5, "parent": 41}
    assert data["findings"][0]["threads"] == [{"pid": 41, "tid": 41, "name": "python3", "role": "crashed"}]


def test_backend_labels_parse_back() -> None:
    for label in ("gdb", "gdb+python-gdb", "core", "core+python-gdb", "replay+python-gdb", "gdb+faulthandler"):
        process = ProcessStacks.from_dict({"pid": 1, "backend": label})
        assert process.backend_label == label


def test_start_mode_reads_and_prints_as_its_name() -> None:
    assert StartMode("fork-server/fast") is StartMode.FORK_FAST
    assert f"{StartMode.FRESH}" == "fresh" and str(StartMode.FORK_FULL) == "fork-server/full"
