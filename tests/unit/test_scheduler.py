"""The plan: series of scenario x variant, seeds, replay commands, start modes, and when series stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifeguard.errors import UsageError
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase
from lifeguard.model.result import RunResult
from lifeguard.model.scenario import Scenario
from lifeguard.plan.scheduler import (
    UNTIL_FAIL_DEFAULT_CAP,
    PlanOptions,
    Scheduler,
    exit_mode_for,
    replay_command,
    run_seed,
    series_of,
)

PYTHON = Interpreter(executable="/usr/bin/python3.11", version=(3, 11, 7), include="/usr/include/python3.11",
                     ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                     libdir="/usr/lib", ldlibrary="libpython3.11.so")


def scenario(name: str, **changes: Any) -> Scenario:
    fields: dict[str, Any] = {"name": name, "function": name, "path": "/work/s.py", "line": 3, "fixture": None,
                              "expect": {"default": "passed"}, "timeout": 20.0, "repeat": {"*": 1}}
    fields.update(changes)
    return Scenario(**fields)


FIXTURED = scenario("pool", fixture="pool", expect={"buggy": "crashed@exit", "fixed": "passed"},
                    repeat={"buggy": 3, "*": 2})
PLAIN = scenario("plain")


def result(item: Scenario, variant: str, index: int, outcome: Outcome) -> RunResult:
    return RunResult(scenario=item.name, variant=variant, index=index, outcome=outcome,
                     phase=None if outcome is Outcome.PASSED else Phase.RUN, expected="passed", signal=None,
                     exit_code=0, duration=0.1, python="3.11.7", run_dir="/tmp/none")


def scheduler(tmp_path: Path, items: list[Scenario], **options: Any) -> Scheduler:
    plan = PlanOptions(**options)
    return Scheduler(series_of(items, plan), plan, PYTHON, {}, tmp_path)


def test_run_seeds_are_stable_and_distinct() -> None:
    assert run_seed(7, "pool", "buggy", 0) == run_seed(7, "pool", "buggy", 0)
    seeds = {run_seed(7, name, variant, index)
             for name in ("pool", "plain") for variant in ("buggy", "fixed") for index in range(50)}
    assert len(seeds) == 200
    assert run_seed(8, "pool", "buggy", 0) != run_seed(7, "pool", "buggy", 0)
    assert all(0 <= s < 2**32 for s in seeds)


def test_series_take_each_scenarios_repeat_per_variant() -> None:
    assert [(s.name, v, n) for s, v, n in series_of([FIXTURED, PLAIN], PlanOptions())] == [
        ("pool", "buggy", 3), ("pool", "fixed", 2), ("plain", "default", 1)]


@pytest.mark.parametrize(("options", "runs"), [
    (PlanOptions(repeat=5), [5, 5]),
    (PlanOptions(seed=99), [1, 1]),  # a replay runs each series once
    (PlanOptions(duration=10.0), [0, 0]),  # no cap: the clock decides
    (PlanOptions(until_fail=True), [UNTIL_FAIL_DEFAULT_CAP] * 2),
    (PlanOptions(until_fail=True, repeat=40), [40, 40]),  # --repeat caps --until-fail
])
def test_series_caps_from_the_stress_options(options: PlanOptions, runs: list[int]) -> None:
    assert [n for _, _, n in series_of([FIXTURED], options)] == runs


def test_variant_selection_and_an_empty_plan() -> None:
    assert [v for _, v, _ in series_of([FIXTURED], PlanOptions(variants=("fixed",)))] == ["fixed"]
    with pytest.raises(UsageError, match="nothing to run"):
        series_of([PLAIN], PlanOptions(variants=("buggy",)))


def test_replay_commands_per_kind() -> None:
    # lifeguard's options first: every word after a plain target is the target's own.
    assert replay_command(PLAIN, "default", 12, ()) == "lifeguard run --seed 12 /work/s.py::plain"
    assert replay_command(FIXTURED, "buggy", 12, ("gc-thread", "jitter")) == (
        "lifeguard run --seed 12 --variant buggy --perturb gc-thread,jitter /work/s.py::pool")
    spaced = scenario("x", path="/work/my scenarios/s.py")
    assert replay_command(spaced, "default", 1, ()) == "lifeguard run --seed 1 '/work/my scenarios/s.py::x'"
    script = scenario("tool", kind="script", path="/work/tool.py")
    assert replay_command(script, "default", 5, ()) == "lifeguard run --seed 5 /work/tool.py"
    typed = scenario("tool", kind="script", path="/work/tool.py", argv=("tool.py", "--fixed", "a b"))
    assert replay_command(typed, "default", 5, ()) == "lifeguard run --seed 5 tool.py --fixed 'a b'"
    code = scenario("code", kind="code", path="", code="pass")
    assert replay_command(code, "default", 5, ()) == "lifeguard run --seed 5 -c pass"
    crash = scenario("code", kind="code", path="", code="import os; os.abort()", argv=("-c", "x"))
    assert replay_command(crash, "default", 5, ()) == "lifeguard run --seed 5 -c 'import os; os.abort()' x"
    module = scenario("pytest", kind="module", path="", module="pytest", argv=("-m", "-x", "tests/"))
    assert replay_command(module, "default", 5, (), timeout=60) == (
        "lifeguard run --seed 5 --timeout 60 -m pytest -x tests/")
    command = scenario("ci.sh", kind="command", path="/work/ci.sh", argv=("./ci.sh", "--fast"))
    assert replay_command(command, "default", 5, ()) == "lifeguard run --seed 5 -- ./ci.sh --fast"
    assert replay_command(script, "default", 5, (), timeout=2.5, python="/opt/py 3/bin/python") == (
        "lifeguard run --seed 5 --timeout 2.5 --python '/opt/py 3/bin/python' /work/tool.py")
    own = scenario("probe", replay="lifeguard probe mod --seed {seed}")
    assert replay_command(own, "default", 77, ()) == "lifeguard probe mod --seed 77"


def test_start_modes() -> None:
    forkable = scenario("quick", fork_server=True)
    exit_bound = scenario("atexit", fork_server=True, expect={"default": "crashed@exit"})
    assert exit_mode_for(forkable, PYTHON, "auto") == "fork-server/fast"
    assert exit_mode_for(PLAIN, PYTHON, "auto") == "fresh"  # it did not opt in
    assert exit_mode_for(forkable, PYTHON, "fresh") == "fresh"
    # An exit-phase expectation needs a whole lifetime: fresh under auto, full finalization when forced.
    assert exit_mode_for(exit_bound, PYTHON, "auto") == "fresh"
    assert exit_mode_for(exit_bound, PYTHON, "fork-server") == "fork-server/full"
    assert exit_mode_for(PLAIN, PYTHON, "fork-server") == "fork-server/fast"
    # Interpreter-start perturbations cannot be forked.
    assert exit_mode_for(forkable, PYTHON, "fork-server", ("dev-mode",)) == "fresh"
    assert exit_mode_for(forkable, PYTHON, "fork-server", ("gc-thread",)) == "fork-server/fast"
    # A script's exit is part of what it does.
    assert exit_mode_for(scenario("tool", kind="script", fork_server=True), PYTHON, "auto") == "fresh"


def test_series_are_interleaved(tmp_path: Path) -> None:
    plan = scheduler(tmp_path, [FIXTURED, PLAIN], base_seed=1)
    assert plan.total == 6
    order = []
    while (spec := plan.next_spec()) is not None:
        order.append((spec.scenario, spec.variant, spec.index))
    assert order == [("pool", "buggy", 0), ("pool", "fixed", 0), ("plain", "default", 0),
                     ("pool", "buggy", 1), ("pool", "fixed", 1), ("pool", "buggy", 2)]


def test_a_spec_carries_its_seed_replay_and_folder(tmp_path: Path) -> None:
    plan = scheduler(tmp_path, [FIXTURED], base_seed=1234, perturbations=("jitter",), timeout=3.0)
    spec = plan.make_spec(FIXTURED, "buggy", 2)
    assert spec.seed == run_seed(1234, "pool", "buggy", 2)
    # The session's --timeout and its interpreter (not this one) come along: the line pastes as is.
    assert spec.replay == (f"lifeguard run --seed {spec.seed} --variant buggy --perturb jitter"
                           " --timeout 3 --python /usr/bin/python3.11 /work/s.py::pool")
    assert spec.run_dir == tmp_path / "pool-buggy-2"
    assert spec.timeout == 3.0 and spec.expected == "crashed@exit" and spec.perturbations == ("jitter",)
    assert spec.env["PYTHONHASHSEED"] == str(spec.seed % (2**32 - 1)) and "LIFEGUARD_JITTER_US" in spec.env
    replayed = scheduler(tmp_path, [FIXTURED], seed=42).make_spec(FIXTURED, "fixed", 0)
    assert replayed.seed == 42 and replayed.timeout == 20.0


def test_until_fail_stops_a_series_at_its_first_failure(tmp_path: Path) -> None:
    other = scenario("other")
    plan = scheduler(tmp_path, [PLAIN, other], until_fail=True, repeat=10)
    assert plan.total is None  # the first failure decides
    issued = [plan.next_spec() for _ in range(4)]
    assert [s.scenario for s in issued if s] == ["plain", "other", "plain", "other"]
    plan.record(result(PLAIN, "default", 1, Outcome.CRASHED))
    plan.record(result(other, "default", 1, Outcome.PASSED))
    rest = []
    while (spec := plan.next_spec()) is not None:
        rest.append(spec.scenario)
    assert rest == ["other"] * 8


def test_native_evidence_for_the_first_failures_of_a_series_only(tmp_path: Path) -> None:
    plan = scheduler(tmp_path, [PLAIN], repeat=6)
    natives = []
    while (spec := plan.next_spec()) is not None:
        natives.append(spec.cores)
        plan.record(result(PLAIN, "default", spec.index, Outcome.HUNG))
    assert natives == [True, True, True, False, False, False]


def test_unknown_perturbations_are_refused_when_the_plan_is_made(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown perturbation 'cosmic-rays'"):
        scheduler(tmp_path, [PLAIN], perturbations=("cosmic-rays",))
