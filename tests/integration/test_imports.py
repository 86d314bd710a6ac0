"""What importing lifeguard costs: the command line loads neither pytest (only the plugin needs it) nor numpy
(no dependency at all), so `lifeguard run` starts fast and works where neither is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, run_cli

IMPORT_TIMEOUT = 60.0
HEAVY = ("pytest", "_pytest", "numpy", "xdist")

# Runs in a fresh interpreter of the one running the tests (this process has imported pytest already);
# the last line of its output is what it loaded.
REPORT_MODULES = """
import json, sys
{code}
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {heavy!r})))
"""
# What report.html is made with: the template engine, loaded only when a page is written.
PAGE_LIBRARIES = ("jinja2", "markupsafe")


def loaded_by(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", REPORT_MODULES.format(code=code, heavy=heavy)], cwd=ROOT,
                          capture_output=True, text=True, timeout=IMPORT_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return list(json.loads(proc.stdout.splitlines()[-1]))


@pytest.mark.parametrize("module", ["lifeguard", "lifeguard.cli", "lifeguard.cli.main"])
def test_the_command_line_imports_neither_pytest_nor_numpy(module: str) -> None:
    assert loaded_by(f"import {module}") == [], f"import {module} loaded them"


# What the entry point loads before a wrapped command starts (lifeguard.run.headstart): none of the standard
# library's slow imports, which would be time the user waits for the command.
SLOW_STDLIB = ("dataclasses", "pathlib", "subprocess", "argparse", "typing", "enum", "tempfile", "shutil", "re")


def test_the_entry_point_imports_little_before_the_head_start() -> None:
    at_start = set(loaded_by("pass", SLOW_STDLIB))  # what the interpreter's site already loaded here
    assert set(loaded_by("import lifeguard.cli.entry", SLOW_STDLIB)) - at_start == set()


def test_the_check_sees_a_slow_import() -> None:
    """The same check on the command line's own module, which needs them all, finds them."""
    at_start = set(loaded_by("pass", SLOW_STDLIB))
    assert set(loaded_by("import lifeguard.cli.main", SLOW_STDLIB)) - at_start >= {"dataclasses", "argparse"}


def test_a_whole_run_with_statistics_imports_neither() -> None:
    """A series of runs (statistics computed, reports written) through the CLI's own main()."""
    code = ("import tempfile\nfrom lifeguard.cli.main import main\n"
            "with tempfile.TemporaryDirectory() as report:\n"
            "    assert main(['run', '--repeat', '2', '--mode', 'fresh', '--report', report, '-c', 'pass']) == 0\n")
    assert loaded_by(code) == []


def test_the_check_sees_an_import_of_pytest() -> None:
    """The same check on a module that does import pytest (the plugin's settings) finds it."""
    assert "pytest" in loaded_by("import lifeguard.pytest_plugin.settings")


def test_the_page_libraries_load_only_when_a_page_is_written() -> None:
    run = "from lifeguard.cli.main import main\nassert main(['run', '-q', '--mode', 'fresh', '-c', 'pass']) == 0\n"
    assert loaded_by(run, PAGE_LIBRARIES) == []
    with_page = ("import tempfile\nfrom lifeguard.cli.main import main\n"
                 "with tempfile.TemporaryDirectory() as report:\n"
                 "    assert main(['run', '-q', '--mode', 'fresh', '--report', report, '-c', 'pass']) == 0\n")
    # The charts' renderer runs in a child of its own: never in the supervisor.
    assert {name.split(".")[0] for name in loaded_by(with_page, PAGE_LIBRARIES)} == {"jinja2", "markupsafe"}


# What a run's child adds to the program's interpreter must stay small: every module more costs start-up and
# leaves objects that every exit finalizes, and an exit race then crashes far less often under lifeguard than
# without it (benchmarks/fidelity.py: typing and collections, imported by one child module, took the rate from
# about half the plain one to a tenth). Checked without site (-S): the plain interpreter imports none of these.
CHILD_MODULES = ("lifeguard.child.bootstrap", "lifeguard.child.plain", "lifeguard.child.crash_park",
                 "lifeguard.child.cores", "lifeguard.child.fork_ends")
SLOW_FOR_THE_CHILD = ("typing", "collections", "enum", "re", "functools", "contextlib", "warnings", "dataclasses",
                      "pathlib", "subprocess")


def test_the_childs_own_modules_import_none_of_the_slow_standard_library() -> None:
    code = (f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nbefore = set(sys.modules)\n"
            f"import {', '.join(CHILD_MODULES)}\n"
            f"print(json.dumps(sorted(set(sys.modules) - before)))")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          timeout=IMPORT_TIMEOUT, check=True)
    added = json.loads(proc.stdout.splitlines()[-1])
    assert [name for name in added if name.split(".")[0] in SLOW_FOR_THE_CHILD] == [], added


# A scenario run's child: the body records the modules its interpreter holds.
MODULES_SCENARIO = '''
import json, sys
import lifeguard


@lifeguard.scenario(fixture={fixture!r}, timeout=60)
def records(*fixture_module):
    with open({out!r}, "w") as f:
        json.dump(sorted(sys.modules), f)
'''
# Nor these, which a lean interpreter's start has not (`from __future__ import annotations` imports a module:
# the modules every child imports spell their annotations without it).
LEAN_START = ("importlib", "importlib.util", "struct", "__future__")


@pytest.mark.parametrize("fixture", [None, "gc_channel"])
def test_a_scenario_run_loads_none_of_the_slow_standard_library_in_a_lean_interpreter(
        tmp_path: Path, fixture: str | None) -> None:
    """In a virtual environment's interpreter (no site hooks of installed packages), a scenario's child, from its
    start to its body (the scenario file and a fixture module loaded), adds none of the slow modules to what the
    bare interpreter starts with: importlib.util alone cost 4.8 ms of every run there."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=IMPORT_TIMEOUT,
                   stdin=subprocess.DEVNULL, capture_output=True)
    python = str(venv / "bin" / "python")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
    bare = subprocess.run([python, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"], env=env,
                          capture_output=True, text=True, timeout=IMPORT_TIMEOUT, check=True)
    out = tmp_path / "modules.json"
    scenario = tmp_path / "records.py"
    scenario.write_text(MODULES_SCENARIO.format(fixture=fixture, out=str(out)))
    proc = run_cli("run", str(scenario), "--python", python, "--mode", "fresh", "--repeat", "1", "--no-native")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    added = set(json.loads(out.read_text())) - set(json.loads(bare.stdout)) - {"json", "gc_channel"}
    slow = [name for name in added if name.split(".")[0] in SLOW_FOR_THE_CHILD or name in LEAN_START]
    assert slow == [], sorted(added)


# A scenario's body reports whether its interpreter loaded `resource` and what its core limit is.
CORE_LIMIT_SCENARIO = '''
import json, sys
import lifeguard


@lifeguard.scenario(timeout=60)
def limits():
    with open("/proc/self/limits") as f:
        soft, hard = next(line for line in f if line.startswith("Max core file size")).split()[4:6]
    with open({out!r}, "w") as f:
        json.dump({{"resource": "resource" in sys.modules, "soft": soft, "hard": hard}}, f)
'''


def test_a_fresh_scenario_child_gets_its_core_limit_without_importing_resource(tmp_path: Path) -> None:
    """The supervisor raises a fresh scenario child's core limit before the child goes on (launch.raise_core_limit),
    so the child needs no `resource` (a third of a millisecond of every run's start), and its cores are on all
    the same: soft limit at the hard one, from a shell whose soft limit is 0."""
    out = tmp_path / "limits.json"
    scenario = tmp_path / "limits.py"
    scenario.write_text(CORE_LIMIT_SCENARIO.format(out=str(out)))
    proc = run_cli("run", str(scenario), "--mode", "fresh", "--repeat", "1", shell_setup="ulimit -S -c 0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(out.read_text())
    assert seen["resource"] is False, seen
    assert seen["soft"] == seen["hard"] != "0", seen


# A scenario's body reports how its interpreter got lifeguard's bootstrap, and what finders it has now.
BUNDLE_SCENARIO = '''
import json, sys
import lifeguard


@lifeguard.scenario(timeout=60)
def loaders():
    with open({out!r}, "w") as f:
        json.dump({{"loader": type(sys.modules["lifeguard.child.bootstrap"].__spec__.loader).__name__,
                   "finders": [type(finder).__name__ for finder in sys.meta_path]}}, f)
'''


def bundle_run(tmp_path: Path, cache: Path) -> dict[str, Any]:
    out = tmp_path / "loaders.json"
    out.unlink(missing_ok=True)
    scenario = tmp_path / "loaders.py"
    scenario.write_text(BUNDLE_SCENARIO.format(out=str(out)))
    proc = run_cli("run", str(scenario), "--mode", "fresh", "--repeat", "1",
                   env={**os.environ, "LIFEGUARD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen: dict[str, Any] = json.loads(out.read_text())
    return seen


def test_a_fresh_child_imports_its_modules_from_the_bundle_which_then_steps_aside(tmp_path: Path) -> None:
    """A fresh child's lifeguard modules come from the bundle (child.bundle), whose finder is gone from sys.meta_path
    by the time the body runs; a bundle cut short is made again by the next session, not used."""
    cache = tmp_path / "cache"
    seen = bundle_run(tmp_path, cache)
    assert seen["loader"] == "BundleFinder", seen
    assert "BundleFinder" not in seen["finders"], seen
    [bundle] = (cache / "child-bundles").iterdir()
    bundle.write_bytes(bundle.read_bytes()[:-100])
    assert bundle_run(tmp_path, cache)["loader"] == "BundleFinder"
    assert len(bundle.read_bytes()) > 1000


@pytest.mark.parametrize("damage", ["none", "other key", "missing"])
def test_the_childs_first_lines_use_the_bundle_only_with_the_key_checked(tmp_path: Path, damage: str) -> None:
    """The boot code a fresh child runs (run.boot.boot_code) loads the bundle when its file holds the key the
    supervisor checked; replaced by another session's (another key) or gone, the child imports as before."""
    from lifeguard.run.boot import boot_code

    cache = tmp_path / "cache"
    env = {**os.environ, "LIFEGUARD_CACHE": str(cache)}
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from lifeguard.run.boot import child_bundle; from lifeguard.run.launch import child_path_dir; "
            "path, key = child_bundle(sys.executable, tuple(sys.version_info)); "
            "print(json.dumps([path, key.hex(), str(child_path_dir())]))")
    made = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                          timeout=IMPORT_TIMEOUT, check=True, env=env)
    path, key, path_dir = json.loads(made.stdout)
    if damage == "other key":
        data = Path(path).read_bytes()
        Path(path).write_bytes(os.urandom(16) + data[16:])
    elif damage == "missing":
        os.unlink(path)
    boot = boot_code(path_dir, (path, bytes.fromhex(key)))
    assert boot.endswith("bootstrap.main()\n")
    probe = boot.replace("bootstrap.main()", "print(type(bootstrap.__spec__.loader).__name__, "
                                              "[type(f).__name__ for f in sys.meta_path].count('BundleFinder'))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=IMPORT_TIMEOUT,
                          check=True, env=env)
    assert proc.stdout.split() == (["BundleFinder", "0"] if damage == "none" else ["SourceFileLoader", "0"])


# Records each compile() of a run's child (an audit hook from its first line: a sitecustomize on PYTHONPATH; a
# run's child is the process started with a spec, which the bootstrap reads later).
COMPILE_AUDIT = '''
import os, sys


def _audit(event, args):
    if event == "compile" and isinstance(args[1], str):
        with open({out!r}, "a") as f:
            f.write(args[1] + "\\n")


if os.environ.get("LIFEGUARD_SPEC"):
    sys.addaudithook(_audit)
'''


def test_a_scenario_file_is_not_compiled_in_every_child_without_its_pycache(tmp_path: Path) -> None:
    """With PYTHONDONTWRITEBYTECODE (as many CI images set it) a scenario file has no .pyc of its own: the
    supervisor's compiled code is what the child runs (launch.file_bytecode), so no child compiles it (a
    millisecond of its start, and the ast types builtin compile() makes, which its exit frees)."""
    out = tmp_path / "compiled.txt"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(COMPILE_AUDIT.format(out=str(out)))
    scenario = tmp_path / "plainly.py"
    scenario.write_text("import lifeguard\n\n\n@lifeguard.scenario(timeout=60)\ndef plainly():\n    pass\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    proc = run_cli("run", str(scenario), "--mode", "fresh", "--repeat", "2", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "__pycache__").exists()
    compiled = out.read_text().split() if out.exists() else []
    assert str(scenario) not in compiled, compiled
    assert "<string>" in compiled, "the audit hook saw no compile() at all (the -c code is one): it did not run"
