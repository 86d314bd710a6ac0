"""A report folder of many made-up runs, for measuring report.html at a size no test can afford to run.

The runs are synthetic (no process ran: no stacks, no run folders), and every reader of this folder says
so. They go through the real sink as a session's runs do: ReportDirSink streams each to results.jsonl, the
series are summarised by the engine's own SeriesTally, and finish() writes report.json, junit.xml and the page
from results.jsonl read back.
"""

from __future__ import annotations

import random
from pathlib import Path

from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult, Session
from lifeguard.model.run import StartMode
from lifeguard.model.scenario import Scenario
from lifeguard.model.tally import SeriesTally
from lifeguard.report.files import ReportDirSink

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")
SERIES = 10
# Series n fails with this rate (crashed@exit), so the page has clean, flaky and always-failing series.
FAILURE_RATES = (0.0, 0.0, 0.0, 0.0, 0.0, 0.01, 0.05, 0.3, 0.0, 1.0)
RUNS_KEPT = 100  # as lifeguard.run.sink: the first runs that are evidence stay in Session.results


def _scenario(number: int) -> Scenario:
    expect = "crashed@exit" if FAILURE_RATES[number] == 1.0 else "passed"
    return Scenario(name=f"tests/test_synthetic.py::test_case[{number}]", function="body", path="",
                    line=0, fixture=None, expect={"default": expect}, timeout=30.0, repeat={"*": 1},
                    description="synthetic: no process ran")


def write_synthetic_report(folder: Path, runs: int, seed: int = 1) -> Session:
    """``runs`` synthetic runs in SERIES series, written into the report folder ``folder``."""
    chance = random.Random(seed)
    scenarios = [_scenario(n) for n in range(SERIES)]
    session = Session(PYTHON, scenarios, base_seed=seed, membership="cgroup2")
    sink = ReportDirSink(folder)
    sink.start(session, runs)
    tallies = {}
    for scenario in scenarios:
        tallies[(scenario.name, "default")] = SeriesTally(scenario, "default",
                                                          scenario.expectation("default", PYTHON.short_version))
    clock = 0.0
    for number in range(runs):
        scenario = scenarios[number % SERIES]
        index = number // SERIES
        failed = chance.random() < FAILURE_RATES[number % SERIES]
        duration = round(chance.lognormvariate(-2.5, 0.4) + (0.5 if failed else 0.0), 4)
        clock += duration / 2
        result = RunResult(
            scenario=scenario.name, variant="default", index=index,
            outcome=Outcome.CRASHED if failed else Outcome.PASSED, phase=Phase.EXIT if failed else None,
            expected=str(scenario.expect["default"]), signal=11 if failed else None,
            exit_code=-11 if failed else 0, duration=duration, python="3.11.7",
            run_dir=str(folder / "runs" / f"synthetic-{number}"), reason="synthetic run: no process ran",
            seed=chance.randrange(2**32), mode=StartMode.FORK_FAST, finished_at=round(clock, 3),
            perturbations=("gc-thread",) if number % 2 else ())
        tally = tallies[(scenario.name, "default")]
        tally.add(result)
        session.finished += 1
        if tally.is_evidence(result) and len(session.results) < RUNS_KEPT:
            session.results.append(result)
        sink.result(result)
    session.summaries = [t.summary() for t in tallies.values()]
    session.duration = clock
    sink.finish(session)
    return session
