"""The head start (lifeguard.run.headstart): `lifeguard run [...] -- COMMAND` starts the command before the rest
of lifeguard is imported, the normal start takes it over only when it is the very process it would start,
and nothing it started outlives lifeguard, however lifeguard ends."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.helpers import Pace, finish_cli, pid_alive, processes_naming, real_python, run_cli, start_cli, wait_for

pytestmark = pytest.mark.timeout(240)

USED = "head start of {name}: used"


def test_a_command_starts_ahead_and_runs_as_a_normal_start_would(tmp_path: Path, pace: Pace) -> None:
    program = tmp_path / "facts.py"
    program.write_text(textwrap.dedent("""
        import json, os, sys
        print("early line", flush=True)  # written before the relays read: kept in the pipe for them
        facts = {"argv": sys.argv, "cwd": os.getcwd(),
                 "stdin": os.read(0, 10).decode()}
        with open(os.path.join(os.environ["FACTS_OUT"], "facts.json"), "w") as out:
            json.dump(facts, out)
    """))
    done = run_cli("run", "-v", "--timeout", pace.deadline_text(30), "--", real_python(), str(program), "a b", "--x",
                   cwd=tmp_path, env={"FACTS_OUT": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert USED.format(name=os.path.basename(real_python())) in done.stderr
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["argv"] == [str(program), "a b", "--x"]
    assert facts["cwd"] == str(tmp_path)
    assert facts["stdin"] == ""  # /dev/null
    assert "early line" in done.stdout  # shown live
    assert not list(tmp_path.glob("lifeguard-runs-*"))


def test_the_seed_of_a_head_start_is_the_plans(tmp_path: Path, pace: Pace) -> None:
    """The plan derives the run's seed from the session's base seed; the head start gave the run the same."""
    done = run_cli("run", "-v", "--", "sh", "-c", "echo seed=$LIFEGUARD_SEED hash=$PYTHONHASHSEED", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert USED.format(name="sh") in done.stderr
    from lifeguard.model.seeds import run_seed

    base = int(next(line for line in done.stdout.splitlines() if line.startswith("lifeguard ")).rsplit(" ", 1)[1])
    seed = run_seed(base, "sh", "default", 0)
    assert f"seed={seed} hash={seed % (2**32 - 1)}" in done.stdout


def test_options_it_does_not_know_mean_a_normal_start(tmp_path: Path) -> None:
    done = run_cli("run", "-v", "--repeat", "2", "--", "true", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "head start" not in done.stderr
    disabled = run_cli("run", "-v", "--", "true", cwd=tmp_path, env={"LIFEGUARD_HEADSTART": "0"})
    assert disabled.returncode == 0 and "head start" not in disabled.stderr


def test_a_head_start_that_is_not_the_runs_process_is_killed(tmp_path: Path, pace: Pace) -> None:
    """The normal start compares every environment entry; one that differs: the head start is ended."""
    token = uuid.uuid4().hex
    script = textwrap.dedent(f"""
        import os, sys
        from lifeguard.run import headstart
        head = headstart.begin(["run", "--", "sleep", "{pace.deadline(60):g}"])
        assert head is not None and head.pid > 0
        env = dict(head.env, EXTRA="{token}")
        assert headstart.claim(["sleep", "{pace.deadline(60):g}"], os.getcwd(), env) is None
        print(head.outcome)
        print(head.pid)
    """)
    done = subprocess.run([real_python(), "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=pace.deadline(60), stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert done.returncode == 0, done.stdout + done.stderr
    outcome, pid = done.stdout.splitlines()
    assert outcome == "not used: the environment differs (EXTRA)"
    assert not pid_alive(int(pid))


def test_a_usage_error_after_the_head_start_leaves_nothing(tmp_path: Path, pace: Pace) -> None:
    token = uuid.uuid4().hex
    done = run_cli("run", "--timeout", "-5", "--", "sh", "-c", f"sleep {pace.deadline(60):g}; : {token}",
                   cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--timeout" in done.stderr
    wait_for(lambda: not processes_naming(token), "the head-started command to be gone", timeout=pace.deadline(10))


def test_lifeguard_killed_while_loading_takes_the_run_with_it(tmp_path: Path, pace: Pace) -> None:
    """The command SIGKILLs lifeguard (its parent) at once, long before lifeguard has loaded and taken the run
    over, after starting a grandchild: the watchdog started with the head start kills the run's tree."""
    token = uuid.uuid4().hex
    ready = tmp_path / "ready"
    command = (f"sh -c 'sleep {pace.deadline(60):g}; : {token}' & echo started > {ready}; kill -9 $PPID; "
               f"sleep {pace.deadline(60):g}; : {token}")
    proc = start_cli("run", "--", "sh", "-c", command, cwd=tmp_path)
    done = finish_cli(proc, timeout=pace.deadline(60))
    assert done.returncode == -9
    assert ready.exists()
    wait_for(lambda: not processes_naming(token), "every process of the run to be killed", timeout=pace.deadline(10))
