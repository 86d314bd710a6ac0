"""Every rule against the evidence of real third-party bugs: the field corpus's runs (benchmarks/field/),
kept trimmed in tests/data/field/ by `benchmarks/accuracy.py --save-evidence`. The heavy venvs are not
needed: each file holds what lifeguard captured (stacks, kernel states, events, stderr messages) and
the finding its case must produce."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from lifeguard.diagnose import diagnose
from lifeguard.model.result import RunResult
from lifeguard.report.text import evidence_text

DATA = Path(__file__).resolve().parents[1] / "data" / "field"
CASES = sorted(path.stem for path in DATA.glob("*.json"))
GENERIC = ("hang", "crash", "said")


def load(name: str) -> tuple[RunResult, dict[str, str]]:
    data = json.loads((DATA / f"{name}.json").read_text())
    return replace(RunResult.from_dict(data), findings=()), data["field_case"]


def test_the_corpus_has_its_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("blind", [False, True], ids=["informed", "blind"])
@pytest.mark.parametrize("name", CASES)
def test_the_case_gets_its_finding_naming_the_culprit(name: str, blind: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blind: every runtime and named message of lifeguard's tables switched off (diagnose/blind.py); the
    finding must come from the shape of the evidence, and may only be less specific."""
    if blind:
        monkeypatch.setenv("LIFEGUARD_BLIND", "all")
    run, case = load(name)
    findings = diagnose(run)
    culprit = re.compile(case["culprit"])
    right = [f for f in findings if f.kind == case["finding"]
             and (culprit.search(f.summary) or any(culprit.search(frame) for frame in f.frames))]
    assert right, f"{case['finding']} matching {case['culprit']!r} not in {[str(f) for f in findings]}"
    if case.get("message"):  # the library's own fatal line is quoted, not faulthandler's "Aborted"
        assert re.search(case["message"], right[0].summary), right[0].summary
    # A specific finding comes first, and no generic one is added to it (cases whose bug no specific kind
    # describes expect the generic one itself).
    if case["finding"] not in GENERIC:
        assert findings[0].kind == case["finding"], [str(f) for f in findings]
        assert not any(f.kind in ("hang", "crash") for f in findings)


@pytest.mark.parametrize("blind", [False, True], ids=["informed", "blind"])
@pytest.mark.parametrize("name", CASES)
def test_the_culprit_is_on_the_terminal_before_any_stack(name: str, blind: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if blind:
        monkeypatch.setenv("LIFEGUARD_BLIND", "all")
    run, case = load(name)
    text = evidence_text(replace(run, findings=tuple(diagnose(run))))
    culprit = re.compile(case["culprit"])
    match = culprit.search(text)
    assert match is not None
    if "--- stacks" in text:
        assert match.start() < text.index("--- stacks")


@pytest.mark.parametrize("name", [n for n in CASES if load(n)[0].outcome.value == "hung"])
def test_no_fork_hang_is_called_a_busy_loop_unless_a_thread_spun(name: str) -> None:
    run, _ = load(name)
    spun = any(t.kernel is not None and t.kernel.activity.value == "spinning"
               for p in run.backtraces for t in p.threads)
    assert spun or not any(f.kind == "busy-loop" for f in diagnose(run))


def test_blind_judging_switches_the_tables_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the blind cases above rest on: with LIFEGUARD_BLIND=all the runtimes table names nothing and a
    library's line is known only by its shape."""
    from lifeguard.diagnose.messages import identify
    from lifeguard.diagnose.runtimes import runtime_of

    run, _ = load("faiss_fork")
    forked = {e.pid for e in run.events if e.name == "forked"}
    child = next(p for p in run.backtraces if p.pid in forked)
    qt_line = "QThread: Destroyed while thread is still running"
    assert runtime_of(child.threads[0]) is not None
    assert identify(qt_line).library == "Qt"  # type: ignore[union-attr]
    monkeypatch.setenv("LIFEGUARD_BLIND", "all")
    assert runtime_of(child.threads[0]) is None
    assert identify(qt_line).library == ""  # type: ignore[union-attr]
    monkeypatch.setenv("LIFEGUARD_BLIND", "qt")  # one library left out: the others still named
    assert identify(qt_line).library == "" and runtime_of(child.threads[0]) is not None  # type: ignore[union-attr]
