"""The hang rules on real captured evidence (tests/data/hangs/, kept with benchmarks/save_evidence.py from
real runs of the programs tests/integration/test_thread_state.py builds; joinstate.json from
tests/integration/test_wait_for.py's run on CPython 3.14 and glibc 2.41, in scripts/py314-chroot.sh's chroot;
fork_gil_freethreaded.json from the bundled fork deadlock on its free-threaded build; forkgil_nolibcdbg.json,
join_nolibcdbg.json and joindel_nolibcdbg.json on 3.14 with libc6-dbg removed):
each hang explained by its own rule, the culprit first on the terminal, no "busy loop" where every thread
sleeps."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from lifeguard.diagnose import diagnose
from lifeguard.diagnose.view import stacks_view
from lifeguard.model.result import RunResult
from lifeguard.model.stacks import FREE_THREADED_NOTE, ProcessStacks, render_text, without_gil
from lifeguard.report.text import evidence_text

DATA = Path(__file__).resolve().parents[1] / "data" / "hangs"


def evidence(name: str) -> RunResult:
    run = RunResult.from_dict(json.loads((DATA / f"{name}.json").read_text()))
    return replace(run, findings=())


# name: (finding kinds, in order; what the first finding must say)
CASES = {
    "sleep": (["hang"], ["every thread blocked", "blocked in futex", "park_forever", "sleep.py:3"]),
    "spin": (["busy-loop"], ["spin_forever", "spinning", "spin.py:3", "holding the GIL"]),
    "stop": (["stopped"], ["is stopped", "stop.py:2"]),
    "gilsleep": (["gil-held-while-blocked"], ["holds the GIL while blocked in pause", "pause_forever",
                                               "1 other thread(s) wait for the GIL"]),
    "lockfork": (["fork-deadlock"], ["inherited from its parent", "PyThread_acquire_lock_timed", "lockfork.py:16",
                                     "Thread-1 (holder)"]),
    "hashfork": (["fork-deadlock", "busy-loop"], ["EVP_update", "hashfork.py:19", "hasher (hashfork.py:12)",
                                                  "held the lock when the parent forked"]),
    "ompfork": (["fork-runtime"], ["GNU OpenMP runtime (libgomp)", "ompfork.py:7", "1 of them OpenMP worker(s)",
                                   "none of them exists in the child"]),
    # glibc 2.41+ (Debian sid, CPython 3.14): pthread_join waits on the joined thread's join state, not its tid;
    # the joined thread is the one whose stack's mapping holds that word.
    # The bundled fork deadlock on CPython 3.14 without libc's debug symbols: glibc's handler runner is "??",
    # and the handler's own frames inside fork() still place the join in a pthread_atfork handler.
    "forkgil_nolibcdbg": (["fork-deadlock"], ["in a pthread_atfork handler", "CallbackPool::StopLocked()",
                                              "HEAD_LOCK"]),
    # The same join cycle and a destructor's join at exit without libc's debug symbols: pthread_join's frames are
    # "??", and the caller's call instruction (read from the live process at capture) names what it called.
    "join_nolibcdbg": (["lock-cycle"], ["thread 13418 joins thread 13422, in stop_drainer (locks.c:35)",
                                        "thread 13422 waits for a mutex that thread 13418 holds"]),
    "joindel_nolibcdbg": (["hang"], ["blocked in futex in pthread_join in libc.so.6, called from join_poller",
                                     "it waits for a join, inside a destructor run by the garbage collector"]),
    "joinstate": (["lock-cycle"], ["thread 20406 joins thread 20413, in stop_drainer (locks.c:35)",
                                   "thread 20413 waits for a mutex that thread 20406 holds, in drainer (locks.c:29)"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_hang_is_explained_by_its_rule(name: str) -> None:
    kinds, phrases = CASES[name]
    findings = diagnose(evidence(name))
    assert [f.kind for f in findings] == kinds, [str(f) for f in findings]
    for phrase in phrases:
        assert phrase in findings[0].summary, findings[0].summary
    assert all(f.evidence for f in findings), "every finding says what it rests on"


@pytest.mark.parametrize("name", sorted(set(CASES) - {"spin", "hashfork"}))
def test_no_busy_loop_where_no_thread_used_cpu(name: str) -> None:
    findings = diagnose(evidence(name))
    assert not any("busy" in f.summary or f.kind == "busy-loop" for f in findings)


def test_without_kernel_readings_a_hang_is_not_called_busy() -> None:
    """Evidence from before kernel readings existed (or a capture without them) says "unknown", not "busy"."""
    run = evidence("sleep")
    bare = tuple(replace(p, threads=tuple(replace(t, kernel=None) for t in p.threads)) for p in run.backtraces)
    findings = diagnose(replace(run, backtraces=bare))
    assert findings and not any("busy" in f.summary for f in findings)


def test_forked_child_first_with_its_culprit_thread_in_full() -> None:
    run = evidence("ompfork")
    run = replace(run, findings=tuple(diagnose(run)))
    view = stacks_view(run).splitlines()
    child = next(e.pid for e in run.events if e.name == "forked")
    assert view[0].startswith(f"Process {child} (forked child of ")
    assert "<-- waits in OpenMP" in view[1]
    assert any("libgomp" in line for line in view[2:4])
    # lifeguard's bootstrap and runpy frames are hidden, the program's own frame is shown.
    assert not any("bootstrap.py" in line or "runpy" in line for line in view)
    assert any("py  <module> (" in line and "ompfork.py:7" in line for line in view)
    # The parent comes after, one line a thread.
    parent_at = next(n for n, line in enumerate(view) if line.startswith("Process ") and n > 0)
    assert all(line.startswith("  Thread ") for line in view[parent_at + 1:])


def test_the_terminal_text_puts_findings_before_stacks() -> None:
    run = evidence("lockfork")
    text = evidence_text(replace(run, findings=tuple(diagnose(run))))
    assert text.index("finding [fork-deadlock]") < text.index("--- stacks, culprit first")
    # A Python dump is not repeated when the native stacks already carry the Python frames (pystack's here).
    assert all(any(t.python_frames for t in p.threads) for p in run.backtraces)
    assert "(faulthandler) ---" not in text


def test_harness_frames_are_kept_in_report_json_and_marked() -> None:
    run = evidence("sleep")
    frames = [f for p in run.backtraces for t in p.threads for f in t.frames]
    marked = [f.to_dict() for f in frames if f.is_harness]
    assert marked and all(d["harness"] is True for d in marked)
    assert all("harness" not in f.to_dict() for f in frames if not f.is_harness)


HANG_RULES = ("busy_loop", "exit_waits_for_thread", "fork_deadlock", "fork_runtime", "gil_deadlock",
              "gil_held_blocking", "lock_cycle", "stopped")


@pytest.mark.parametrize("name", sorted(set(CASES) - {"sleep", "joindel_nolibcdbg"}))  # (generic findings)
def test_the_hang_rules_say_nothing_of_a_run_that_did_not_hang(name: str) -> None:
    import importlib

    from lifeguard.diagnose.evidence import Evidence
    from lifeguard.model.outcomes import Outcome

    hung = Evidence.of(evidence(name))
    for outcome in (Outcome.FAILED, Outcome.CRASHED):
        other = replace(hung, outcome=outcome)
        for rule in HANG_RULES:
            check = importlib.import_module(f"lifeguard.diagnose.rules.{rule}").check
            assert check(other) == [], (rule, outcome)
    assert any(importlib.import_module(f"lifeguard.diagnose.rules.{rule}").check(hung) for rule in HANG_RULES)


def test_a_free_threaded_interpreter_without_its_gil_is_described_without_one() -> None:
    """The bundled fork deadlock on a free-threaded CPython 3.13.15 (GIL off), as pystack read it: its labels
    are a GIL's ("GIL waiting" on the worker in PyGILState_Ensure). Marked free-threaded (explain does so when
    the run's interpreter is one and nothing turned the GIL on), no thread, finding or fix speaks of a GIL."""
    gil_word = re.compile(r"\bGIL\b")
    raw = evidence("fork_gil_freethreaded")
    assert "GIL waiting" in render_text(raw.backtraces)
    [as_read] = diagnose(raw)
    assert gil_word.search(as_read.hint), as_read.hint

    processes = tuple(without_gil(p) for p in raw.backtraces)
    text = render_text(processes)
    assert not gil_word.search(text.replace(FREE_THREADED_NOTE, "").replace("PyGILState", "")), text
    assert "waiting to attach" in text and FREE_THREADED_NOTE in text
    [finding] = diagnose(replace(raw, backtraces=processes))
    assert finding.kind == "fork-deadlock"
    assert "HEAD_LOCK" in finding.summary and "pthread_atfork prepare handler" in finding.summary
    for said in (finding.summary.replace("PyGILState", ""), finding.hint):
        assert not gil_word.search(said), said
    assert all(ProcessStacks.from_dict(p.to_dict()) == p for p in processes)


def test_a_frame_named_by_its_call_site_keeps_it_through_report_json() -> None:
    run = evidence("join_nolibcdbg")
    callers = [f for p in run.backtraces for t in p.threads for f in t.frames if f.calls]
    assert [f.function for f in callers] == ["stop_drainer"] and callers[0].calls == "pthread_join"
    assert all(ProcessStacks.from_dict(p.to_dict()) == p for p in run.backtraces)
    assert all("calls" not in f.to_dict() for p in run.backtraces for t in p.threads for f in t.frames if not f.calls)
