"""What a fixture call of the pytest plugin returns: the runs, and assertions that show their evidence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from lifeguard.model.outcomes import Expectation, Outcome, Phase
from lifeguard.model.result import Finding, RunResult, Session, counts_text
from lifeguard.model.survey import ProbeRecord
from lifeguard.report.text import evidence_text


def outcome_text(result: RunResult) -> str:
    """``crashed@exit`` (``passed`` has no phase)."""
    return f"{result.outcome.value}@{result.phase.value}" if result.phase else result.outcome.value


class Runs:
    """The supervised runs of one call (a few scenarios x variants x repeats), oldest first."""

    def __init__(self, label: str, session: Session, exercised: tuple[ProbeRecord, ...] = ()) -> None:
        self.label = label
        self.session = session
        self.exercised = exercised  # a probe's: what each run did with the module, in run order
        self.results: list[RunResult] = sorted(session.results, key=lambda r: (r.scenario, r.variant, r.index))

    def __iter__(self) -> Iterator[RunResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def result(self) -> RunResult:
        """The first run that did not pass, else the first run."""
        if not self.results:
            raise AssertionError(f"{self.label}: no run finished (interrupted?)")
        return next((r for r in self.results if r.outcome is not Outcome.PASSED), self.results[0])

    @property
    def outcome(self) -> Outcome:
        return self.result.outcome

    @property
    def phase(self) -> Phase | None:
        return self.result.phase

    @property
    def findings(self) -> list[Finding]:
        return [finding for result in self.results for finding in result.findings]

    @property
    def counts(self) -> dict[str, int]:
        """``{"crashed@exit": 3, "passed": 1}``."""
        return dict(Counter(outcome_text(r) for r in self.results))

    @property
    def evidence(self) -> str:
        """The readable evidence of the first run that did not pass."""
        return evidence_text(self.result)

    def __str__(self) -> str:
        return f"{self.label}: {len(self.results)} run(s): {counts_text(self.counts)}"

    def __repr__(self) -> str:
        return f"<Runs {self}>"

    def _fail(self, wanted: str, shown: RunResult | None) -> AssertionError:
        text = f"{self}; expected {wanted}"
        if shown is not None:
            text += "\n" + evidence_text(shown)
        return AssertionError(text)

    def assert_clean(self) -> Runs:
        """Every run passed; else the failure shows the first other run's evidence."""
        __tracebackhide__ = True
        if not self.results:
            raise self._fail("every run to pass", None)
        bad = next((r for r in self.results if r.outcome is not Outcome.PASSED), None)
        if bad is not None:
            raise self._fail("every run to pass", bad)
        return self

    def assert_outcome(self, expected: str, phase: str | None = None) -> Runs:
        """Every run ended in ``expected`` (``"hung"``, ``"crashed@exit"``, ``"sometimes:corrupted"``).

        ``phase`` may be given apart: ``assert_outcome("crashed", phase="exit")``.
        """
        __tracebackhide__ = True
        text = f"{expected}@{phase}" if phase else expected
        try:
            expectation = Expectation.parse(text)
        except ValueError as exc:
            raise ValueError(f"assert_outcome({text!r}): {exc}") from None
        verdict = expectation.judge([(r.outcome, r.phase) for r in self.results])
        if verdict.value == "expected":
            return self
        odd = next((r for r in self.results if not expectation.matches(r.outcome, r.phase)
                    and not (expectation.sometimes and r.outcome is Outcome.PASSED)), None)
        raise self._fail(str(expectation), odd or (self.results[0] if self.results else None))

    def assert_finding(self, kind: str) -> Runs:
        """Some run has a finding of ``kind`` (e.g. ``"static-destructor-after-finalize"``)."""
        __tracebackhide__ = True
        if any(finding.kind == kind for finding in self.findings):
            return self
        kinds = sorted({f.kind for f in self.findings}) or ["none"]
        shown = self.result if self.results else None
        raise self._fail(f"a finding of kind {kind!r} (found: {', '.join(kinds)})", shown)
