"""How well lifeguard explains real bugs: the field corpus (benchmarks/field/) under `lifeguard run`.

Every case folder benchmarks/field/<case>/ holds a case.json, a setup.sh that makes the case's
venv with pinned versions (and prints its python last), a bug.py that reproduces a real
upstream bug and a passing.py that does the same work the fixed way. For each case this
script runs setup.sh, runs bug.py under lifeguard with the case's expectation and reads
report.json, then runs passing.py under lifeguard expecting a clean pass:

- finding right: some finding has kind == case.finding, its summary or frames match the
  case's culprit regex and, when the case names the library's fatal `message`, its summary quotes it;
- culprit on terminal: the culprit regex matches what lifeguard printed;
- passing variant: passing.py passed.

With --blind, each case is judged twice: informed, then blind (LIFEGUARD_BLIND=all: every runtime of
diagnose/runtimes.py and every named message of diagnose/messages.py switched off, stricter than leaving
out the case's own package), and both scores are printed side by side: a blind finding may be less
specific, but must still be of the right kind and name the culprit.

    python benchmarks/accuracy.py [CASE ...] [--timeout 20] [--no-setup] [--save-evidence DIR] [--blind]

Prints one line per case, then `findings right N/M, culprit on terminal N/M, passing variants
N/M` (with --blind, a line of each). Exit 0 when every case is right on all three (in both judgings)
and its bug reproduced as expected; 1 otherwise; 2 on a usage error (an unknown case, a missing venv
with --no-setup).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from save_evidence import trimmed as trimmed_run  # noqa: E402  (a sibling script, not a package)

BENCHMARKS = Path(__file__).resolve().parent
FIELD = BENCHMARKS / "field"
REPO = BENCHMARKS.parent
SETUP_TIMEOUT = 900.0  # seconds for one setup.sh (a torch venv takes about a minute)
TERM_GRACE = 30.0  # seconds a timed-out lifeguard gets to kill its runs after SIGTERM
CAPTURE_MARGIN = 180.0  # seconds lifeguard may take past a run's deadline (gdb, dumps, report)
CASE_KEYS = ("package", "versions", "upstream", "bug", "passing", "expect", "finding", "culprit", "description")


class UsageError(Exception):
    """A problem with the command line or the corpus: exit 2 with its message."""


@dataclass(frozen=True)
class Case:
    """One folder of the corpus and what its case.json promises."""

    name: str
    folder: Path
    package: str
    upstream: str
    bug: str
    passing: str
    expect: str
    finding: str
    culprit: re.Pattern[str]
    message: re.Pattern[str] | None = None  # the library's own fatal line, which the finding must quote


@dataclass(frozen=True)
class Completed:
    """A bounded subprocess: exit code (None when killed at its timeout) and output."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        """True when the process was killed at its timeout."""
        return self.returncode is None


@dataclass(frozen=True)
class LifeguardRun:
    """One `lifeguard run` of a script: its exit code, terminal output and first run in report.json."""

    returncode: int | None
    terminal: str
    run: dict[str, Any] | None

    @property
    def outcome(self) -> str:
        """outcome@phase of the run (or why there is none)."""
        if self.run is None:
            return "no-report" if self.returncode is not None else "lifeguard-timeout"
        phase = self.run.get("phase")
        return f"{self.run.get('outcome')}@{phase}" if phase else str(self.run.get("outcome"))


@dataclass(frozen=True)
class Verdict:
    """What one case scored."""

    case: Case
    bug: LifeguardRun
    reproduced: bool
    finding_right: bool
    culprit_on_terminal: bool
    passing_right: bool
    passing_outcome: str

    @property
    def all_right(self) -> bool:
        """True when the bug reproduced and all three scores hold."""
        return self.reproduced and self.finding_right and self.culprit_on_terminal and self.passing_right


def load_case(folder: Path) -> Case:
    """Read and check folder/case.json."""
    path = folder / "case.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: {error}") from error
    missing = [key for key in CASE_KEYS if key not in data]
    if missing:
        raise UsageError(f"{path}: missing {', '.join(missing)}")
    try:
        culprit = re.compile(str(data["culprit"]))
    except re.error as error:
        raise UsageError(f"{path}: culprit is not a regex: {error}") from error
    try:
        message = re.compile(str(data["message"])) if data.get("message") else None
    except re.error as error:
        raise UsageError(f"{path}: message is not a regex: {error}") from error
    return Case(folder.name, folder, str(data["package"]), str(data["upstream"]), str(data["bug"]),
                str(data["passing"]), str(data["expect"]), str(data["finding"]), culprit, message)


def discover(names: list[str]) -> list[Case]:
    """The named cases, or every folder of benchmarks/field/ that has a case.json."""
    if names:
        folders = [FIELD / name.rstrip("/").split("/")[-1] for name in names]
        unknown = [folder.name for folder in folders if not (folder / "case.json").is_file()]
        if unknown:
            raise UsageError(f"no such case: {', '.join(unknown)} (cases live in {FIELD})")
    else:
        folders = sorted(folder for folder in FIELD.iterdir() if (folder / "case.json").is_file())
    return [load_case(folder) for folder in folders]


def run_bounded(argv: list[str], timeout: float, cwd: Path | None = None) -> Completed:
    """Run argv in its own process group; past timeout kill the whole group."""
    with subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            stdout, stderr = proc.communicate()
            return Completed(None, stdout, stderr + f"\n[killed after {timeout:.0f} s]")
        finally:
            kill_group(proc.pid)  # whatever the process left behind in its group
        return Completed(proc.returncode, stdout, stderr)


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM proc's group (lifeguard then kills its runs' trees and writes its report), SIGKILL after 30 s."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE)
    except subprocess.TimeoutExpired:
        pass
    kill_group(proc.pid)


def signal_group(pgid: int, signum: int) -> None:
    """Send signum to every process of group pgid (a group already gone is fine)."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group pgid (a group already gone is fine)."""
    signal_group(pgid, signal.SIGKILL)


def venv_python(case: Case) -> Path:
    """Where setup.sh puts the case's interpreter."""
    home = os.environ.get("LIFEGUARD_FIELD_HOME") or str(Path.home() / ".cache" / "lifeguard" / "field")
    return Path(home) / case.name / "bin" / "python"


def setup(case: Case, no_setup: bool) -> Path:
    """The case's venv python: made by setup.sh, or (--no-setup) required to exist already."""
    if no_setup:
        python = venv_python(case)
        if not python.exists():
            raise UsageError(f"{case.name}: no venv at {python.parent.parent} (run without --no-setup)")
        return python
    done = run_bounded(["bash", str(case.folder / "setup.sh")], SETUP_TIMEOUT, cwd=case.folder)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines or not Path(lines[-1]).exists():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{case.name}: setup.sh failed (exit {done.returncode}): {tail}")
    return Path(lines[-1])


def lifeguard_command(given: str | None) -> list[str]:
    """How to start lifeguard: --lifeguard, else this checkout's (python -m from the repo), else PATH's."""
    if given:
        return shlex.split(given)
    if (REPO / "lifeguard" / "__main__.py").is_file():
        return [sys.executable, "-m", "lifeguard"]  # run from REPO: the checkout's lifeguard is imported
    found = shutil.which("lifeguard")
    return [found] if found else [sys.executable, "-m", "lifeguard"]


def run_lifeguard(command: list[str], script: Path, python: Path, expect: str, timeout: float,
                  report_dir: Path) -> LifeguardRun:
    """`lifeguard run SCRIPT` under the case's python; the terminal output and report.json's first run."""
    argv = [*command, "run", "--python", str(python), "--timeout", str(timeout), "--expect", expect,
            "--report", str(report_dir), str(script)]
    done = run_bounded(argv, timeout + CAPTURE_MARGIN, cwd=REPO)
    terminal = done.stdout + done.stderr
    try:
        runs = json.loads((report_dir / "report.json").read_text()).get("runs") or []
    except (OSError, ValueError):
        runs = []
    return LifeguardRun(done.returncode, terminal, dict(runs[0]) if runs else None)


def finding_matches(case: Case, run: dict[str, Any] | None) -> bool:
    """True when some finding is of the case's kind, names the culprit in its summary or frames and, where
    the library printed a fatal message, quotes it."""
    for finding in (run or {}).get("findings") or []:
        if finding.get("kind") != case.finding:
            continue
        if case.message is not None and not case.message.search(str(finding.get("summary", ""))):
            continue
        texts = [str(finding.get("summary", "")), *(str(frame) for frame in finding.get("frames") or [])]
        if any(case.culprit.search(text) for text in texts):
            return True
    return False


def expected_outcome(expect: str, run: LifeguardRun) -> bool:
    """True when the run ended as expect says (outcome, and phase when expect names one)."""
    if run.run is None:
        return False
    outcome, _, phase = expect.partition("@")
    return run.run.get("outcome") == outcome and (not phase or run.run.get("phase") == phase)


def judge(case: Case, python: Path, command: list[str], timeout: float, scratch: Path) -> Verdict:
    """Run the case's bug and passing programs under lifeguard and score them."""
    bug = run_lifeguard(command, case.folder / case.bug, python, case.expect, timeout, scratch / f"{case.name}-bug")
    passing = run_lifeguard(command, case.folder / case.passing, python, "passed", timeout,
                            scratch / f"{case.name}-passing")
    passing_right = passing.returncode == 0 and passing.run is not None and passing.run.get("outcome") == "passed"
    return Verdict(case, bug, expected_outcome(case.expect, bug), finding_matches(case, bug.run),
                   bool(case.culprit.search(bug.terminal)), passing_right, passing.outcome)


def yes_no(flag: bool) -> str:
    """'yes' or 'NO' (the failures stand out)."""
    return "yes" if flag else "NO"


def case_line(verdict: Verdict) -> str:
    """One line per case: what the bug run ended in, the findings' kinds, and the three scores."""
    kinds = [str(f.get("kind")) for f in (verdict.bug.run or {}).get("findings") or []]
    status = "ok  " if verdict.all_right else "FAIL"
    return (f"{status} {verdict.case.name}: bug {verdict.bug.outcome} (expected {verdict.case.expect}), "
            f"findings [{', '.join(kinds) or '-'}] want {verdict.case.finding}: {yes_no(verdict.finding_right)}; "
            f"culprit on terminal: {yes_no(verdict.culprit_on_terminal)}; "
            f"passing {verdict.passing_outcome}: {yes_no(verdict.passing_right)}")


def summary_line(verdicts: list[Verdict]) -> str:
    """The closing line, in exactly this form."""
    total = len(verdicts)
    findings = sum(v.finding_right for v in verdicts)
    terminal = sum(v.culprit_on_terminal for v in verdicts)
    passing = sum(v.passing_right for v in verdicts)
    return (f"findings right {findings}/{total}, culprit on terminal {terminal}/{total}, "
            f"passing variants {passing}/{total}")


def trimmed(run: dict[str, Any], case: Case) -> dict[str, Any]:
    """A failed run of report.json, small enough for tests/data (save_evidence.trimmed), with its case."""
    data = trimmed_run(run)
    data["field_case"] = {"name": case.name, "package": case.package, "upstream": case.upstream,
                          "finding": case.finding, "culprit": case.culprit.pattern,
                          "message": case.message.pattern if case.message else None}
    return data


def save_evidence(verdict: Verdict, folder: Path) -> None:
    """Write the bug run's trimmed report to folder/<case>.json (nothing when there is no report)."""
    if verdict.bug.run is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{verdict.case.name}.json"
    path.write_text(json.dumps(trimmed(verdict.bug.run, verdict.case), indent=1) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help="case folders of benchmarks/field/ (default: all)")
    parser.add_argument("--timeout", type=float, default=20.0, help="lifeguard's --timeout per run (default 20)")
    parser.add_argument("--no-setup", action="store_true", help="do not run setup.sh; the venvs must exist")
    parser.add_argument("--save-evidence", type=Path, metavar="DIR", help="write each bug run's trimmed report here")
    parser.add_argument("--lifeguard", metavar="CMD", help="how to start lifeguard (default: this checkout's)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print lifeguard's terminal output of each run")
    parser.add_argument("--blind", action="store_true",
                        help="also judge every case with lifeguard's tables switched off (LIFEGUARD_BLIND=all)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Score every selected case; exit 0 only when all are right."""
    args = parse_args(argv)
    try:
        cases = discover(args.cases)
        if not cases:
            raise UsageError(f"no case in {FIELD}")
        command = lifeguard_command(args.lifeguard)
        print(f"lifeguard: {shlex.join(command)} (from {REPO})", file=sys.stderr)
        verdicts: list[Verdict] = []
        blind: list[Verdict] = []
        with tempfile.TemporaryDirectory(prefix="lifeguard-accuracy-") as scratch:
            for case in cases:
                python = setup(case, args.no_setup)
                verdict = judge(case, python, command, args.timeout, Path(scratch))
                if args.verbose:
                    print(verdict.bug.terminal.rstrip(), file=sys.stderr)
                print(("informed " if args.blind else "") + case_line(verdict), flush=True)
                if args.save_evidence:
                    save_evidence(verdict, args.save_evidence)
                verdicts.append(verdict)
                if args.blind:
                    blind.append(judge_blind(case, python, command, args.timeout, Path(scratch) / "blind"))
                    if args.verbose:
                        print(blind[-1].bug.terminal.rstrip(), file=sys.stderr)
                    print("blind    " + case_line(blind[-1]), flush=True)
    except UsageError as error:
        print(f"accuracy: {error}", file=sys.stderr)
        return 2
    if args.blind:
        print("informed: " + summary_line(verdicts))
        print("blind:    " + summary_line(blind))
    else:
        print(summary_line(verdicts))
    return 0 if all(v.all_right for v in verdicts + blind) else 1


def judge_blind(case: Case, python: Path, command: list[str], timeout: float, scratch: Path) -> Verdict:
    """judge() with lifeguard's tables switched off (diagnose/blind.py)."""
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["LIFEGUARD_BLIND"] = "all"
    try:
        return judge(case, python, command, timeout, scratch)
    finally:
        del os.environ["LIFEGUARD_BLIND"]


if __name__ == "__main__":
    sys.exit(main())
