"""A survey's vocabulary as frozen data: what was installed, what was probed with which hook, and the triage.

A survey probes the extension modules of installed distributions (``lifeguard survey``); each probe that
did not pass is triaged into one of three classes:

- ``documented``: a limitation the package's own documents or tracker state (a link says where);
- ``candidate``: a possible bug, with a standalone reproduction script;
- ``probe-error``: the probe could not judge the package (the module failed to import, the hook raised,
  lifeguard failed the run): the hook or the environment needs fixing, not the package;
- ``not exercised``: the hook used nothing of the module (no call of it returned, none of its objects came
  back, no callback was called): a hook that uses the package is needed before anything can be said.

A probe that passed, having exercised the module, is ``clean``. Each probe run's ProbeRecord says what it did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from lifeguard.model.outcomes import Outcome

# The test-suite probes (lifeguard survey --tests, pytest --lifeguard-probe): lifeguard.pytest_plugin.suite_probes.
SUITE_PROBES: dict[str, str] = {
    "fork-finalize": "fork after the test; the child drops what the test made and exits through finalization",
    "fork-rerun": "fork after the test; the child runs the test again and exits through finalization",
    "gc-thread": "what the test made dies in reference cycles collected on another thread",
    "gc-cycle": "what the test made dies in reference cycles collected on the main thread",
}
FORK_PROBES = frozenset({"fork-finalize", "fork-rerun"})
# How lifeguard's report words a failure that pytest itself made of a test run in a group (not lifeguard's verdict).
PYTEST_FAILED = "pytest failed its {when}: {message}"
EXIT_PROBE = "exit"  # a survey's --lifeguard session without a probe: each group's real exit
SUITE_SESSIONS = (EXIT_PROBE, *SUITE_PROBES)

# How a test's record in lifeguard's report says what its probe did (the survey reads them back).
APPLIED = "{probe} probe: {did}"
NOT_APPLIED = "{probe} probe not applied: {why}"
FAILED = "{probe} probe failed: the test passed, then {what}"


def probe_note(entry: dict[str, Any]) -> str:
    """A passed test's note of its probe's log entry: what it did, or why it did nothing."""
    probe = str(entry.get("probe"))
    if entry.get("skipped"):
        return NOT_APPLIED.format(probe=probe, why=entry["skipped"])
    return APPLIED.format(probe=probe, did=entry.get("did", ""))


def probe_failed_note(probe: str) -> str:
    """The note of a test whose probe failed (its run's outcome and evidence say how)."""
    return FAILED.format(probe=probe, what=SUITE_PROBES.get(probe, probe).split("; ", 1)[-1])


def probe_of_notes(notes: tuple[str, ...] | list[str]) -> tuple[str, str, str] | None:
    """(probe, "applied" | "not applied" | "failed", the rest) from a test's notes, or None."""
    for note in notes:
        for state, form in (("applied", APPLIED), ("not applied", NOT_APPLIED), ("failed", FAILED)):
            marker = form.split("{probe}", 1)[1].split("{", 1)[0]
            probe, found, rest = note.partition(marker)
            if found and probe in SUITE_PROBES:
                return probe, state, rest
    return None

CLEAN = "clean"
DOCUMENTED = "documented"
CANDIDATE = "candidate"
PROBE_ERROR = "probe-error"
NOT_EXERCISED = Outcome.NOT_EXERCISED.value  # the class of a probe whose runs were not exercised
TRIAGE_CLASSES = (CLEAN, DOCUMENTED, CANDIDATE, PROBE_ERROR, NOT_EXERCISED)
# Classes that make `lifeguard survey` exit 1: something someone has to look at.
NEEDS_A_LOOK = (CANDIDATE, PROBE_ERROR, NOT_EXERCISED)


@dataclass(frozen=True)
class ThreadSeen:
    """A thread the probe's hook started, as /proc showed it: its name, state letter and CPU time."""

    name: str
    state: str
    cpu_ns: int

    def __str__(self) -> str:
        return f"{self.name} {self.state} {self.cpu_ns / 1e6:.1f} ms"


@dataclass(frozen=True)
class ForkSeen:
    """One fork of a fork probe: when (seconds after the hook returned), and the threads alive then."""

    after: float
    threads: int
    hook_threads: tuple[ThreadSeen, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"after": self.after, "threads": self.threads,
                "hook_threads": [{"name": t.name, "state": t.state, "cpu_ns": t.cpu_ns} for t in self.hook_threads]}


@dataclass(frozen=True)
class ProbeRecord:
    """What one probe run did with the module: the calls its hook made of the module and how many raised, the
    callbacks native code called, the objects returned (of the module's types), the native threads before and
    after the hook (and those it started), and each fork with the threads alive at it."""

    probe: str
    exercised: bool
    calls: int = 0
    raised: int = 0
    callback_calls: int = 0
    returned: int = 0
    of_module: int = 0
    threads_before: int = 0
    threads_after: int = 0
    hook_threads: tuple[ThreadSeen, ...] = ()
    waited: float = 0.0  # seconds the fork probe waited for the hook's threads to have run
    forks: tuple[ForkSeen, ...] = ()

    def text(self) -> str:
        """One line: what the run did."""
        parts = [f"{self.calls} call(s) of the module ({self.raised} raised)",
                 f"{self.returned} object(s) returned ({self.of_module} of the module)",
                 f"{self.callback_calls} callback call(s)",
                 f"native threads {self.threads_before} -> {self.threads_after}"]
        if self.forks:
            moments = ", ".join(f"{f.after:.2f}" for f in self.forks)
            busy = {f"{t.name} {t.state}" for f in self.forks for t in f.hook_threads}
            threads = f" with the hook's thread(s) {', '.join(sorted(busy))}" if busy else \
                " (the hook started no thread)"
            parts.append(f"{len(self.forks)} fork(s) at {moments} s after the hook{threads}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "exercised": self.exercised, "calls": self.calls, "raised": self.raised,
                "callback_calls": self.callback_calls, "returned": self.returned, "of_module": self.of_module,
                "threads_before": self.threads_before, "threads_after": self.threads_after,
                "hook_threads": [{"name": t.name, "state": t.state, "cpu_ns": t.cpu_ns} for t in self.hook_threads],
                "waited": self.waited, "forks": [f.to_dict() for f in self.forks]}


@dataclass(frozen=True)
class HookRef:
    """The function a probe calls as ``FUNC(module)``, and where it came from."""

    source: str  # "user" (--hooks FILE), "entry-point" (group lifeguard.hooks), "bundled", "generic"
    path: str  # the Python file that defines it (loaded by path in the child)
    qualname: str

    def spec(self) -> dict[str, Any]:
        """The callable spec the probe child loads (lifeguard.child.pytest_body.load_callable). lifeguard's own
        hooks are files named after their packages (hooks/pandas.py): loaded under a name of their own, so
        their folder never goes on sys.path, where ``import pandas`` in the package probed would find them."""
        own = self.source in ("bundled", "generic")
        name = "lifeguard_survey_hook_" + os.path.splitext(os.path.basename(self.path))[0] if own else None
        return {"path": self.path, "qualname": self.qualname, "module_name": name, "sys_path": []}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "function": self.qualname}


@dataclass(frozen=True)
class Skipped:
    """An extension module of a distribution that the survey did not probe, and why."""

    module: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "why": self.why}


@dataclass(frozen=True)
class Package:
    """An installed distribution as the survey sees it."""

    name: str
    version: str
    extensions: tuple[str, ...]  # every extension module found in its installed files
    targets: tuple[str, ...] = ()  # the modules probed
    skipped: tuple[Skipped, ...] = ()
    hook: HookRef | None = None


@dataclass(frozen=True)
class Limitation:
    """A documented limitation: ``package`` at ``versions`` (a PEP 440 specifier, "" for any) fails ``probe``."""

    package: str
    versions: str
    probe: str
    link: str
    why: str


@dataclass(frozen=True)
class SurveyEntry:
    """One package x module x probe mode: the probe's series, and its triage."""

    package: str
    version: str
    module: str
    probe: str
    verdict: str  # the series' verdict: expected (passed) or unexpected
    runs: int
    counts: dict[str, int]
    triage: str  # one of TRIAGE_CLASSES
    reason: str = ""  # one line: what failed (the first failed run's reason, or why it is a probe error)
    findings: tuple[dict[str, Any], ...] = ()
    run_dir: str = ""  # the first failed run's evidence folder
    reproduction: str = ""  # candidate: the standalone script
    limitation: Limitation | None = None  # documented: the entry that says so
    hook: HookRef | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    exercised: tuple[ProbeRecord, ...] = ()  # what each run that said so did with the module

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "version": self.version, "module": self.module, "probe": self.probe,
                "verdict": self.verdict, "runs": self.runs, "counts": dict(self.counts), "triage": self.triage,
                "reason": self.reason, "findings": list(self.findings), "run_dir": self.run_dir or None,
                "reproduction": self.reproduction or None,
                "limitation": None if self.limitation is None else
                {"link": self.limitation.link, "why": self.limitation.why, "versions": self.limitation.versions},
                "hook": None if self.hook is None else self.hook.to_dict(), "notes": list(self.notes),
                "exercised": [record.to_dict() for record in self.exercised]}
