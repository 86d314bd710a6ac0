"""`lifeguard probe` on the bundled fixtures: every buggy build's bug is found, every fixed build is clean.

The probes know nothing of these modules: each is imported from its build
folder (--path) and driven by a small hook, as a user would drive their own
extension. Real crashes, a real fork deadlock, real corruption.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lifeguard.build import available_fixtures, build_fixture
from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE
from lifeguard.interpreter import resolve
from lifeguard.plan.probes import PROBES
from tests.helpers import Pace, load_report, run_cli

# A fork deadlock lasts until the deadline: keep it short. Fixed runs take well under a second on a quiet
# machine (the gc-thread probe's rounds stop after GC_SECONDS): at least this, scaled to the machine's pace.
PROBE_TIMEOUT_AT_LEAST = 4

HOOKS = {
    # The onnxruntime pool: register callables that only the native pool owns.
    "static_destructor": """
        import types


        def exercise(fx):
            factor = float(fx.size() + 2)

            def apply(*values):
                return tuple(value * factor for value in values)

            def backward(*grads):
                return tuple(grad * factor for grad in grads)

            fx.register_function(f"scale_{fx.size()}", types.SimpleNamespace(apply=apply, backward=backward))
    """,
    # MXNet's custom operators: worker threads with a callback still queued.
    "fork_gil": """
        def exercise(fx):
            fx.start(2)
            fx.hold()
            fx.push(len, "queued")
    """,
    # TVM Disco: calls stream large frames; what they return dies wherever gc runs.
    "gc_channel": """
        import os

        from lifeguard import child

        PAYLOAD = bytes(range(256)) * 256  # 64 KiB: streamed in pieces, not written at once
        _sessions = {}  # per process: a session's reader thread does not survive fork


        def _session(fx):
            if os.getpid() not in _sessions:
                _sessions[os.getpid()] = fx.session_create(write_window_us=5000)
            return _sessions[os.getpid()]


        def exercise(fx):
            session = _session(fx)
            func = fx.session_get_global_func(session, "runtime.ModuleGetFunction")
            return [func, fx.session_call_packed(session, func, PAYLOAD)]


        def check(fx):
            report = fx.session_shutdown(_session(fx), 5.0)
            if report["corrupted"]:
                child.report_corruption(report["message"], data=report["evidence"])
    """,
}


def _probe(fixture: str, variant: str, probes: tuple[str, ...], tmp_path: Path, pace: Pace) -> tuple[int, dict, str]:
    if fixture not in available_fixtures():
        pytest.skip(f"fixture {fixture} is not in this checkout")
    built = build_fixture(fixture, variant, resolve())
    hooks = tmp_path / f"{fixture}_hooks.py"
    hooks.write_text(textwrap.dedent(HOOKS[fixture]))
    report = tmp_path / f"report-{variant}"
    args = ["probe", fixture, "--path", str(built.directory), "--hook", f"{hooks}:exercise",
            "--timeout", pace.deadline_text(PROBE_TIMEOUT_AT_LEAST), "--report", str(report), "-j", "2"]
    if "def check" in HOOKS[fixture]:
        args += ["--check", f"{hooks}:check"]
    for probe in probes:
        args += ["--probe", probe]
    proc = run_cli(*args)
    assert (report / "report.json").exists(), proc.stdout + proc.stderr
    runs = {run["scenario"].partition("[")[0].removeprefix("probe-"): run for run in load_report(report)["runs"]}
    assert set(runs) == set(probes), proc.stdout
    for run in runs.values():  # every probe runs under -X dev and PYTHONMALLOC=debug
        assert run["perturbations"] == ["dev-mode", "malloc-debug"], run
    return proc.returncode, runs, proc.stdout + proc.stderr


def _kinds(run: dict) -> set[str]:
    return {finding["kind"] for finding in run["findings"]}


def test_exit_probe_finds_the_static_destructor(tmp_path: Path, pace: Pace) -> None:
    code, runs, output = _probe("static_destructor", "buggy", ("exit",), tmp_path, pace)
    assert code == EXIT_UNEXPECTED, output
    assert (runs["exit"]["outcome"], runs["exit"]["phase"]) == ("crashed", "exit"), output
    assert "static-destructor-after-finalize" in _kinds(runs["exit"]), output
    assert "FunctionPool::~FunctionPool" in output  # the native frame that released the objects


def test_fork_and_exit_probes_find_the_pool_holding_the_gil(tmp_path: Path, pace: Pace) -> None:
    code, runs, output = _probe("fork_gil", "buggy", ("fork-use", "exit"), tmp_path, pace)
    assert code == EXIT_UNEXPECTED, output
    assert runs["fork-use"]["outcome"] == "hung", output
    assert "fork-deadlock" in _kinds(runs["fork-use"]), output
    assert (runs["exit"]["outcome"], runs["exit"]["phase"]) == ("crashed", "exit"), output


def test_gc_thread_probe_finds_the_interleaved_channel(tmp_path: Path, pace: Pace) -> None:
    code, runs, output = _probe("gc_channel", "buggy", ("gc-thread",), tmp_path, pace)
    assert code == EXIT_UNEXPECTED, output
    assert runs["gc-thread"]["outcome"] == "corrupted", output
    assert "wrong-thread-gc" in _kinds(runs["gc-thread"]), output


# gc_channel's fork probe is left out: a Session created before fork aborts in
# the forked child's finalization (its reader thread did not survive fork), in
# both builds: a fork-safety bug of its own, outside this fixture's incident.
FIXED_PROBES = {"static_destructor": tuple(PROBES), "fork_gil": tuple(PROBES),
                "gc_channel": ("exit", "gc-thread", "gc-cycle")}


@pytest.mark.parametrize("fixture", sorted(FIXED_PROBES))
def test_fixed_builds_pass_every_probe(fixture: str, tmp_path: Path, pace: Pace) -> None:
    code, runs, output = _probe(fixture, "fixed", FIXED_PROBES[fixture], tmp_path, pace)
    assert code == EXIT_OK, output
    assert {run["outcome"] for run in runs.values()} == {"passed"}, output


def test_a_module_that_cannot_be_imported_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("probe", "no_such_module_here", "--probe", "exit", "--report", "out", cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert "cannot import no_such_module_here in the child: ModuleNotFoundError" in proc.stderr


def test_a_module_that_is_not_there_is_said_at_once_without_probing(tmp_path: Path) -> None:
    """As `python -c "import X"` says it: two lines, no probe run, no child's traceback on the terminal."""
    proc = run_cli("probe", "no_such_module_here", cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr.splitlines() == [
        "lifeguard: error: cannot import no_such_module_here in the child: ModuleNotFoundError: No module named "
        "'no_such_module_here'",
        "lifeguard: put its folder on the import path with --path DIR, or pick the interpreter it is installed in "
        "with --python"]


@pytest.mark.parametrize(("hook", "message"), [
    ("hooks.py", "expected FILE.py:FUNC"),
    ("missing.py:exercise", "no such file missing.py"),
    ("hooks.py:absent", "hooks.py defines no function 'absent'"),
    ("broken.py:exercise", "broken.py:1: syntax error"),
])
def test_bad_hooks_are_usage_errors(tmp_path: Path, hook: str, message: str) -> None:
    """The same messages straight from parse_hook: tests/unit/test_probe_files.py."""
    (tmp_path / "hooks.py").write_text("def exercise(module):\n    pass\n")
    (tmp_path / "broken.py").write_text("def exercise(module:\n")
    proc = run_cli("probe", "json", "--hook", hook, cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert message in proc.stderr


def test_an_unknown_probe_name_is_a_usage_error() -> None:
    """probe_scenarios' own checks: tests/unit/test_probe_files.py."""
    proc = run_cli("probe", "json", "--probe", "leak")
    assert proc.returncode == EXIT_USAGE and "invalid choice: 'leak'" in proc.stderr


def test_a_pure_python_module_passes_every_probe(tmp_path: Path, pace: Pace) -> None:
    """The probes themselves are clean: json, driven through a hook that keeps objects around."""
    (tmp_path / "hooks.py").write_text("def exercise(json):\n    return json.loads('[1, {\"a\": 2}]')\n")
    timeout = pace.deadline_text(PROBE_TIMEOUT_AT_LEAST)
    proc = run_cli("probe", "json", "--hook", "hooks.py:exercise", "--timeout", timeout, "-j", "2", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    for probe in PROBES:
        assert f"ok   probe-{probe}[json][default]" in proc.stdout


SLOW_IMPORT = """
# A pure-Python module that takes a while to import and allocates much while it does.
TABLE = {index: (str(index), [index] * 3) for index in range(200_000)}
"""


def test_a_hook_importing_a_slow_module_on_first_call_passes_the_gc_thread_probe(tmp_path: Path, pace: Pace) -> None:
    """The false gil-deadlock: a collector collecting back to back starved a hook still importing. The probe
    now warms the hook up on the main thread first, and its collector yields between collections."""
    (tmp_path / "slow_module.py").write_text(SLOW_IMPORT)
    (tmp_path / "hooks.py").write_text("def exercise(json):\n    import slow_module\n"
                                       "    return [json.loads('[1]'), slow_module.TABLE[7]]\n")
    timeout = pace.deadline_text(PROBE_TIMEOUT_AT_LEAST)
    proc = run_cli("probe", "json", "--hook", "hooks.py:exercise", "--probe", "gc-thread", "--timeout", timeout,
                   cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "ok   probe-gc-thread[json][default]" in proc.stdout
