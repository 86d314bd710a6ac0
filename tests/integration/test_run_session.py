"""A run's main process starts as a shell starts a job: a process group of its own (the tree's kill reaches
it, the terminal's Ctrl-C does not), in the session lifeguard was started in. A session of its own is a
scheduler group of its own too (autogroup), where an exit race played out half as often as in a plain run
(benchmarks/fidelity.py). Every start mode: fresh, head start, command, fork-server, a forked pytest test."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import real_python, run_cli
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

# What the run's main process says of itself, written to OUT.
RECORD = '''
import json, os


def _autogroup(pid):
    # Empty for the kernel's default group: a session whose ancestry never called setsid (a container's init).
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return (f.read().split() or ["default"])[0]
    except OSError:
        return None


def record(out):
    sid = os.getsid(0)
    with open(out, "w") as f:
        json.dump({"pid": os.getpid(), "pgid": os.getpgid(0), "sid": sid, "autogroup": _autogroup("self"),
                   "leader_autogroup": _autogroup(sid)}, f)
'''
_RECORDER: dict[str, object] = {}
exec(RECORD, _RECORDER)


def _check(out: Path) -> None:
    seen = json.loads(out.read_text())
    assert seen["pgid"] == seen["pid"], seen  # leads its own process group
    assert seen["sid"] != seen["pid"], seen  # not a session of its own: the one lifeguard was started in
    # So the scheduler groups it as a plain run. A session's group is inherited from its leader, who may be gone
    # (CI's was): in this test's own session, this test's group is the session's.
    own_session = seen["sid"] == os.getsid(0)
    expected = _RECORDER["_autogroup"]("self") if own_session else seen["leader_autogroup"]  # type: ignore[operator]
    assert seen["autogroup"] == expected, seen


@pytest.mark.parametrize("kind", ["script", "command", "command-no-headstart"])
def test_a_script_and_a_command_run_in_lifeguards_session(tmp_path: Path, kind: str) -> None:
    script = tmp_path / "where.py"
    script.write_text(RECORD + "\nimport sys\nrecord(sys.argv[1])\n")
    out = tmp_path / "where.json"
    argv = [str(script)] if kind == "script" else ["--", real_python(), str(script)]
    proc = run_cli("run", "--report", str(tmp_path / "report"), "--no-native", *argv, str(out),
                   env={"LIFEGUARD_HEADSTART": "0" if kind == "command-no-headstart" else "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check(out)


def test_a_fork_server_run_is_in_lifeguards_session(scenario_file, tmp_path: Path) -> None:
    out = tmp_path / "server.json"
    path = scenario_file(RECORD + f'''
import lifeguard


@lifeguard.scenario(timeout=20)
def where():
    record({str(out)!r})
''')
    proc = run_cli("run", str(path), "--mode", "fork-server", "--report", str(tmp_path / "report"), "--no-native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check(out)


def test_a_forked_test_is_in_pytests_session(plugin_env: pytest.Pytester, tmp_path: Path) -> None:
    out = tmp_path / "forked.json"
    plugin_env.makepyfile(test_where=RECORD + f"\n\ndef test_where():\n    record({str(out)!r})\n")
    result = plugin_env.runpytest_subprocess("--lifeguard", timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(passed=1)
    _check(out)
