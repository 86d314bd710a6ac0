"""The crash rules on real captured evidence (tests/data/crashes/, kept with benchmarks/save_evidence.py from
runs of the programs tests/integration/test_crash_findings.py builds), the library message table, and
the signal that was sent rather than raised by a fault."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lifeguard.diagnose import diagnose
from lifeguard.diagnose.messages import cause_quote, identify, scan_lines
from lifeguard.model.result import RunResult
from lifeguard.model.signals import SignalInfo
from lifeguard.model.stacks import without_gil

DATA = Path(__file__).resolve().parents[1] / "data" / "crashes"


def evidence(name: str) -> RunResult:
    return replace(RunResult.from_dict(json.loads((DATA / f"{name}.json").read_text())), findings=())


CASES = {
    "daemon_exit": ("daemon-thread-at-finalization", ["run_callbacks (cbloop.cpp:5)", "libcbloop.so",
                                                      "terminate called without an active exception"]),
    "worker_exit": ("thread-running-at-exit", ["worker (worker_exit.c:8)", "still running at exit"]),
    "underflow": ("refcount-underflow-at-finalization", ["type_dealloc", "_ctypes.cpython"]),
    "abort_exit": ("crash", ["os_abort_impl", "atexit callback", "phase exit"]),
    "exit_with_pending_callback": ("static-destructor-after-finalize", ["CallbackPool::~CallbackPool",
                                                                      "crashed entering Python"]),
}


def test_a_static_destructor_crash_is_not_also_a_thread_running_at_exit() -> None:
    """The bundled MXNet exit case: a worker crashes while exit()'s handlers run; one finding, not two."""
    assert [f.kind for f in diagnose(evidence("exit_with_pending_callback"))] == ["static-destructor-after-finalize"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_crash_is_explained_by_its_rule(name: str) -> None:
    kind, phrases = CASES[name]
    findings = diagnose(evidence(name))
    assert findings[0].kind == kind, [str(f) for f in findings]
    for phrase in phrases:
        assert phrase in findings[0].summary, findings[0].summary
    assert findings[0].evidence


def test_the_generic_rule_never_blames_abort_plumbing() -> None:
    summary = diagnose(evidence("abort_exit"))[0].summary
    assert "cfunction_vectorcall" not in summary and " abort " not in summary and "raise" not in summary


def test_library_messages_are_found_anywhere_in_stderr_in_order() -> None:
    lines = ["noise"] * 500 + ["terminate called without an active exception"] + ["more"] * 500 + [
        "Fatal Python error: Aborted"]
    found = scan_lines(lines)
    assert [(line.number, line.text) for line in found] == [
        (501, "terminate called without an active exception"), (1002, "Fatal Python error: Aborted")]
    quote = cause_quote(found)
    assert quote is not None and quote.message.library == "libstdc++" and quote.before_crash is True


@pytest.mark.parametrize(("line", "library"), [
    ("Tcl_AsyncDelete: async handler deleted by the wrong thread", "Tcl"),
    ("QThread: Destroyed while thread is still running", "Qt"),
    ("free(): double free detected in tcache 2", "glibc"),
    ("thread '<unnamed>' panicked at src/lib.rs:12:5:", "Rust"),
    ("OMP: Error #15: Initializing libiomp5.so, but found libomp.so already initialized.", "OpenMP"),
    ("Fatal Python error: PyThreadState_Get: the function must be called with the GIL held", "CPython"),
    ("terminate called after throwing an instance of 'std::runtime_error'", "libstdc++"),
])
def test_the_message_table_knows_common_runtimes(line: str, library: str) -> None:
    message = identify(line)
    assert message is not None and message.library == library and message.hint


def test_a_sent_signal_has_no_fault_address() -> None:
    """faulthandler re-raises with tgkill: si_code SI_TKILL, and the core's si_addr field holds the sender's pid."""
    sent = SignalInfo("SIGSEGV", 11, -6, "0x75ba", 1)
    assert sent.fault_address is None and "0x75ba" not in str(sent)
    assert SignalInfo("SIGSEGV", 11, 1, "0x10", 1).fault_address == "0x10"


def test_faulthandlers_re_raise_is_shown_once() -> None:
    from lifeguard.diagnose.view import stacks_view

    run = evidence("daemon_exit")
    view = stacks_view(replace(run, findings=tuple(diagnose(run))))
    assert "(the signal, re-raised by its handler: 3 frames)" in view
    crashed = view.split("<-- SIGABRT", 1)[1]
    assert crashed.count("raise at") == 1 and crashed.count("__pthread_kill_implementation") == 1


def test_an_unnamed_library_frame_is_the_crash_site_not_its_libc_caller() -> None:
    """A stripped library's frame under abort() (tensorstore's fork refusal had one) is where it crashed; the
    libc frame that called it (__run_prefork_handlers) is not."""
    from lifeguard.diagnose.crash import crash_frame
    from lifeguard.model.stacks import Frame, ThreadStack

    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    thread = ThreadStack(7, frames=(Frame("raise", library=libc), Frame("abort", library=libc),
                                    Frame(None, library="/site-packages/_native.so", address="0x10"),
                                    Frame("__run_prefork_handlers", library=libc)))
    found = crash_frame(thread)
    assert found is not None and found[0] == 2, found


def test_the_c_caller_of_a_wait_prefers_a_named_library_frame_then_an_unnamed_one() -> None:
    """Who made a blocking call: the library's named function when it has one further out (zmq_ctx_term above
    an unnamed libzmq frame), else its unnamed frame ("?? in lib"), never the interpreter that called it."""
    from lifeguard.diagnose.evidence import c_caller
    from lifeguard.model.stacks import Frame, ThreadStack

    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    wait = Frame("pthread_cond_wait", library=libc)
    named = ThreadStack(1, frames=(wait, Frame(None, library="/venv/libzmq.so.5", address="0x1"),
                                   Frame("zmq_ctx_term", library="/venv/libzmq.so.5"),
                                   Frame("do_call_core", library="/usr/lib/libpython3.11.so.1.0")))
    found = c_caller(named, 0)
    assert found is not None and found.function == "zmq_ctx_term"
    stripped = ThreadStack(2, frames=(wait, Frame(None, library="/venv/_cyobservability.so", address="0x2"),
                                      Frame(None, library="/venv/_cyobservability.so", address="0x3"),
                                      Frame("do_call_core", library="/usr/lib/libpython3.11.so.1.0")))
    found = c_caller(stripped, 0)
    assert found is not None and found.function is None and found.address == "0x2"


def test_a_header_whose_message_is_on_the_next_line_is_quoted_with_it() -> None:
    lines = scan_lines(["thread '<unnamed>' (7540) panicked at src/lib.rs:15:9:",
                        "mypool: fork() called after the pool started",
                        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
                        "HDF5-DIAG: Error detected in HDF5 (1.12.2) thread 1:",
                        "  #000: H5A.c line 528 in H5Aopen_by_name(): can't open attribute"])
    assert [line.text for line in lines] == [
        "thread '<unnamed>' (7540) panicked at src/lib.rs:15:9: mypool: fork() called after the pool started",
        "HDF5-DIAG: Error detected in HDF5 (1.12.2) thread 1:"]  # an indented trace line is not a message
    rust = identify(lines[0].text)
    assert rust is not None and rust.library == "Rust"


def test_a_forked_child_ended_by_its_library_is_quoted_before_pythons_fork_warning() -> None:
    """CPython 3.12+ warns in the parent of a fork with threads; the child's library says why it ends the child
    on the same stderr, in either order (evidence: test_fork_pool's program on CPython 3.14, where the warning
    came first in some runs). The library's words are the cause whichever line comes first."""
    run = evidence("fork_pool_ended")
    said, warned = run.stderr_messages
    assert said.text.startswith("mypool:") and "DeprecationWarning" in warned.text
    for lines in ((said, warned), (replace(warned, number=1), replace(said, number=2))):
        [finding] = diagnose(replace(run, stderr_messages=lines))
        assert finding.kind == "fork-runtime"
        assert 'after a library said: "mypool: fork() called after the pool started' in finding.summary, \
            finding.summary
        assert "DeprecationWarning" not in finding.summary


def test_a_daemon_thread_ended_without_a_gil_is_told_to_check_before_attaching() -> None:
    """The same evidence as if its interpreter were free-threaded with the GIL off (explain marks it so): the
    fix speaks of attaching to the interpreter, not of a GIL."""
    run = evidence("daemon_exit")
    [as_is] = [f for f in diagnose(run) if f.kind == "daemon-thread-at-finalization"]
    assert "before taking the GIL" in as_is.hint
    free = replace(run, backtraces=tuple(without_gil(p) for p in run.backtraces))
    [finding] = [f for f in diagnose(free) if f.kind == "daemon-thread-at-finalization"]
    assert "before attaching to the interpreter" in finding.hint and "the GIL" not in finding.hint
