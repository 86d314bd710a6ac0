"""After a run failed: native crash stacks (cores or a replay), Python frames merged into native
stacks, findings, readable evidence files.

Passing runs never get here, so they pay nothing for any of it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from lifeguard.capture.cores import core_setup
from lifeguard.capture.native import analyse_crash_cores, gdb_missing_note, merge_python_stacks, replay_under_gdb
from lifeguard.child.protocol import CORES_ON, FORKED, STDERR_FILE
from lifeguard.diagnose import diagnose
from lifeguard.diagnose.messages import GIL_ENABLED, identify, scan_file
from lifeguard.diagnose.stack_phase import observed_phase
from lifeguard.diagnose.view import stacks_view
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import Finding, RunResult, StderrLine
from lifeguard.model.run import BacktraceMethod, RunKind, RunSpec
from lifeguard.model.stacks import without_gil
from lifeguard.run.classify import phase_of
from lifeguard.run.launch import core_files


def explain(spec: RunSpec, result: RunResult) -> RunResult:
    """Add native crash stacks (from cores) and findings to a failed run. A passed run pays one listdir:
    a core in its folder means a forked child crashed although the parent went on."""
    cores = core_files(spec.run_dir) if spec.cores else []
    if result.outcome is Outcome.PASSED and not cores:
        return result
    notes = list(result.notes)
    backtraces = list(result.backtraces)
    if backtraces and result.python_stacks:
        # A hang's native stacks without python-gdb get the faulthandler dump's Python frames.
        backtraces = merge_python_stacks(backtraces, result.python_stacks)
    if spec.cores and (result.outcome is Outcome.CRASHED or cores):
        replay = spec.backtrace is BacktraceMethod.REPLAY
        # read while it waited (lifeguard.run.parked)
        parked = any(p.signal is not None and p.signal.is_crash for p in backtraces)
        if not replay and not cores and not parked:
            setup = core_setup()
            # A wrapped program (-m, a command: a whole CI step) is not run a second time behind the user's back.
            rerun = spec.kind not in (RunKind.MODULE, RunKind.COMMAND)
            if not setup.usable:
                notes.append(setup.note + (" Falling back to a replay under gdb." if rerun else ""))
                replay = rerun and result.outcome is Outcome.CRASHED
            elif spec.workdir and result.outcome is Outcome.CRASHED:
                notes.append(no_core_note(result))
        try:
            if replay:
                processes, problems = replay_under_gdb(spec)
            else:
                processes, problems = analyse_crash_cores(cores, spec.interpreter.executable, keep=spec.keep_cores)
            backtraces.extend(processes)
            notes.extend(problems)
        except Exception as exc:  # evidence is best effort; the outcome stands
            notes.append(f"native crash analysis failed: {exc!r}")
    if not spec.cores and result.outcome in (Outcome.CRASHED, Outcome.HUNG):
        notes.append("native stacks not captured for this run (--no-native, or this series already has them)")
    elif not backtraces and result.outcome in (Outcome.CRASHED, Outcome.HUNG):
        missing = gdb_missing_note()
        if missing:
            notes.append(missing)
    outcome, phase, reason = result.outcome, result.phase, result.reason
    forked = {e.pid for e in result.events if e.name == FORKED}
    crashed = [p for p in backtraces if p.signal is not None and p.signal.is_crash]
    if crashed and {p.pid for p in crashed} <= forked:
        # Only forked children left cores: the crash was theirs, whatever the parent did after it.
        phase = Phase.FORK_CHILD
        if outcome is not Outcome.HUNG and (outcome is not Outcome.CRASHED or result.signal is None):
            child = crashed[0]
            outcome = Outcome.CRASHED
            reason = f"forked child {child.pid} was killed by {child.signal}" + (f"; {reason}" if reason else "")
    elif spec.kind is RunKind.COMMAND and result.outcome is Outcome.CRASHED and len(crashed) == 1:
        # A command's crash is the crashed process's: its own events say where in its life it was.
        pid = crashed[0].pid
        if any(e.pid == pid for e in result.events):
            phase = phase_of(list(result.events), pid)
    messages = scan_file(spec.run_dir / STDERR_FILE)
    if gil_was_off(spec, messages):
        executable = os.path.realpath(spec.interpreter.executable)
        backtraces = [without_gil(p) if p.exe is None or os.path.realpath(p.exe) == executable else p
                      for p in backtraces]
    result = replace(result, outcome=outcome, phase=phase, reason=reason, backtraces=tuple(backtraces),
                     notes=tuple(notes), stderr_messages=messages)
    if (observed := observed_phase(result)) is not None:  # the stacks outrank what the process said of itself
        notes.append(f"phase {observed[0]} from {observed[1]} (the run's own events said {result.phase})")
        result = replace(result, phase=observed[0], notes=tuple(notes))
    try:
        findings = tuple(diagnose(result))
    except Exception as exc:  # a rule's bug must not lose the run
        findings = (Finding("internal", f"diagnosis failed: {exc!r}", ""),)
    result = replace(result, findings=findings)
    return replace(result, evidence={**result.evidence, **write_artifacts(result)})


def gil_was_off(spec: RunSpec, messages: tuple[StderrLine, ...]) -> bool:
    """A free-threaded interpreter whose GIL stayed off: not turned on by PYTHON_GIL=1, -X gil=1, or a module
    that does not declare Py_mod_gil (which CPython says on stderr)."""
    if not spec.interpreter.free_threaded:
        return False
    if {**os.environ, **spec.env}.get("PYTHON_GIL") == "1" or "gil=1" in "".join(spec.python_flags).replace(" ", ""):
        return False
    return not any((m := identify(line.text)) is not None and m.about == GIL_ENABLED for line in messages)


def no_core_note(result: RunResult) -> str:
    """Why a plain target's crash left no core, and what gives its native stacks."""
    turned_on = [e for e in result.events if e.name == CORES_ON]
    if turned_on:
        return ("no core file: the crashed process had turned core dumps on in the run folder, but the kernel "
                "wrote none (a hard RLIMIT_CORE of 0, or the core was too large)")
    return ("no core file: a plain target works in your folder, where no core may be written, so core dumps "
            "are off until it starts finalizing (then it moves into the run folder): this crash came before "
            "that. Native stacks of it: rerun with --backtrace replay")


def write_artifacts(result: RunResult) -> dict[str, str]:
    """The readable evidence of a failed run, as files in its folder."""
    run_dir = Path(result.run_dir)
    written = {}
    if result.backtraces:
        path = run_dir / "backtraces.txt"
        path.write_text("\n".join(process.text for process in result.backtraces))
        written["backtraces"] = str(path)
    if result.findings:
        path = run_dir / "findings.txt"
        lines = []
        for finding in result.findings:
            lines.append(str(finding))
            if finding.hint:
                lines.append(f"  fix: {finding.hint}")
            lines.extend(f"  seen: {item}" for item in finding.evidence)
        if result.backtraces:
            lines += ["", "stacks, culprit first (every frame of every thread: backtraces.txt):", stacks_view(result)]
        path.write_text("\n".join(lines) + "\n")
        written["findings"] = str(path)
    return written
