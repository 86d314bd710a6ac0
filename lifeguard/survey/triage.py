"""Triage of a survey's probes: each failed series is documented, a candidate bug, a probe error, or not
exercised (a run's hook used nothing of the module: lifeguard.child.probe failed it so, and its record says so).

A probe error is a run that could not judge the package: the module failed to import, the hook raised (a
traceback through the hook's file, in the run's stderr: the forked child's too), or lifeguard itself failed
the run (outcome ``error``). Otherwise a failure that a documented limitation covers (package, version,
probe mode) is ``documented``, with the link; any other is a ``candidate``, which gets a standalone
reproduction script (lifeguard.survey.repro).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult, Session
from lifeguard.model.survey import (
    CANDIDATE,
    CLEAN,
    DOCUMENTED,
    NOT_EXERCISED,
    PROBE_ERROR,
    Limitation,
    SurveyEntry,
)
from lifeguard.plan.probes import probe_records, probe_verdict
from lifeguard.survey.limitations import matching
from lifeguard.survey.plan import Probed

# The reproduction writer: (what was probed, its first failed run) -> the script's path.
Reproduce = Callable[[Probed, RunResult], str]


EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception|Exit|Interrupt|Warning)\b")


def last_error_line(text: str) -> str:
    """The exception line of the last traceback (``ValueError: ...``: the first line after its frames, not
    warnings printed later at exit), else the last exception-looking line, else the text's last line."""
    raw = text.splitlines()
    starts = [i for i, line in enumerate(raw) if line.startswith("Traceback (most recent call last):")]
    if starts:
        for line in raw[starts[-1] + 1:]:
            if line and not line[0].isspace() and EXCEPTION_LINE.match(line):
                return line.strip()
    lines = [line.strip() for line in raw if line.strip()]
    errors = [line for line in lines if EXCEPTION_LINE.match(line)]
    return (errors or lines or [""])[-1]


def probe_error(probed: Probed, run: RunResult) -> str:
    """Why ``run`` says nothing about the package, or "" when it does."""
    if run.outcome is Outcome.ERROR:
        return f"lifeguard could not run the probe: {run.reason}"
    if run.outcome is Outcome.FAILED and run.phase is Phase.IMPORT:
        return f"{probed.module} failed to import: {last_error_line(run.stderr_tail) or run.reason}"
    hook = probed.package.hook
    if run.outcome is Outcome.FAILED and hook is not None and f'File "{hook.path}"' in run.stderr_tail:
        return f"the {hook.source} hook {hook.qualname} raised: {last_error_line(run.stderr_tail)}"
    return ""


def triage(session: Session, meaning: dict[str, Probed], limitations: Sequence[Limitation],
           reproduce: Reproduce) -> list[SurveyEntry]:
    """One entry per series of the session, in the plan's order."""
    entries = []
    for summary in session.summaries:
        probed = meaning[summary.scenario]
        package = probed.package
        entry = SurveyEntry(package=package.name, version=package.version, module=probed.module, probe=probed.probe,
                            verdict=summary.verdict.value, runs=summary.runs, counts=dict(summary.counts),
                            triage=CLEAN, hook=package.hook,
                            exercised=probe_records(session.results, summary.scenario))
        run = summary.first_failure
        if probe_verdict(summary, entry.exercised) == NOT_EXERCISED:
            why = run.reason if run is not None else "the hook used nothing of the module"
            entry = replace(entry, triage=NOT_EXERCISED, reason=why, run_dir=run.run_dir if run is not None else "")
        elif run is not None:
            entry = replace(entry, reason=run.reason, findings=tuple(f.to_dict() for f in run.findings),
                            run_dir=run.run_dir, notes=tuple(run.notes))
            why = probe_error(probed, run)
            limitation = matching(limitations, package.name, package.version, probed.probe)
            if why:
                entry = replace(entry, triage=PROBE_ERROR, reason=why)
            elif limitation is not None:
                entry = replace(entry, triage=DOCUMENTED, limitation=limitation)
            else:
                entry = replace(entry, triage=CANDIDATE, reproduction=reproduce(probed, run))
        entries.append(entry)
    return entries
