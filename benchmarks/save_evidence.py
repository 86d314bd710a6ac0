"""Keep a failed run's evidence from a report.json as a small file under tests/data/, for the unit tests.

The unit tests check every rule against real captured evidence (stacks, kernel thread states, events,
faulthandler dumps) without starting the programs again or installing their packages. What is kept
is the run as report.json has it, minus what no rule reads (stdout, per-run paths), with the
machine-specific path prefixes replaced by neutral ones.

    python benchmarks/save_evidence.py REPORT_DIR_OR_JSON OUT.json [--run N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

# Keys of a run that rules never read, or that only name this machine's folders.
DROPPED = ("stdout_tail", "evidence", "run_dir", "finished_at", "replay")
# Above this many bytes, drop what is derived or long: each process's rendered text (rebuilt from its
# frames on load) and the middle of long faulthandler dumps.
EVIDENCE_LIMIT = 200_000


def _prefixes() -> list[tuple[str, str]]:
    """Machine-specific path prefixes and their neutral stand-ins, longest first."""
    pairs = [(str(Path.home()), "/home/user"), (os.environ.get("TMPDIR", "/tmp"), "/tmp")]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def scrub(text: str) -> str:
    """Replace the home folder, interpreter install prefixes and temporary folders by neutral paths."""
    text = re.sub(r"/[\w.-]+/\.pyenv/versions/(\d+\.\d+)\.\d+", r"/usr/local/python\1", text)
    for prefix, neutral in _prefixes():
        if prefix and prefix != neutral:
            text = text.replace(prefix, neutral)
    return text


def trimmed(run: dict[str, Any]) -> dict[str, Any]:
    """A run of report.json without what no rule reads, its paths scrubbed."""
    kept = {key: value for key, value in run.items() if key not in DROPPED}
    kept["run_dir"] = "/runs/" + Path(str(run.get("run_dir", "run"))).name
    kept["stderr_tail"] = str(run.get("stderr_tail") or "")[-4000:]
    data: dict[str, Any] = json.loads(scrub(json.dumps(kept)))
    if len(json.dumps(data)) > EVIDENCE_LIMIT:
        for process in data.get("backtraces") or []:
            process["text"] = ""
    if len(json.dumps(data)) > EVIDENCE_LIMIT:
        stacks = data.get("python_stacks") or {}
        data["python_stacks"] = {pid: str(dump)[:8000] for pid, dump in stacks.items()}
    return data


def load_run(source: Path, index: int | None) -> dict[str, Any]:
    """The run to keep: the given index, else the first run that did not pass."""
    path = source / "report.json" if source.is_dir() else source
    runs = json.loads(path.read_text())["runs"]
    if index is not None:
        return dict(runs[index])
    return dict(next((r for r in runs if r.get("outcome") != "passed"), runs[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="a --report folder or its report.json")
    parser.add_argument("out", type=Path, help="the evidence file to write")
    parser.add_argument("--run", type=int, default=None, help="index of the run (default: the first failed one)")
    args = parser.parse_args(argv)
    run = trimmed(load_run(args.source, args.run))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(run, indent=1) + "\n")
    print(f"{args.out}: {run.get('outcome')}@{run.get('phase')}, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
