"""Plain targets as Python's own command line runs them: a script with its arguments, -m, -c and any command,
in the user's folder, their output shown live; cores only ever in the run folder."""

from __future__ import annotations

import json
import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import Pace, load_report, pid_alive, real_python, run_cli, run_pids

pytestmark = pytest.mark.timeout(240)

# What a program reports of itself: the facts Python's command line decides.
REPORTER = """
import json, os, sys
main = sys.modules["__main__"]
facts = {"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "main_file": getattr(main, "__file__", None),
         "main_name": main.__name__, "lifeguard_loaded": "lifeguard" in sys.modules}
with open("facts.json", "w") as out:  # relative: lands in the working directory
    json.dump(facts, out)
print("hello from the program \\x1b[31mred\\x1b[0m")
"""

HANG_AT_LEAST = 4.0


def facts(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "facts.json").read_text()))


def assert_gone(run: dict[str, Any]) -> None:
    for pid in run_pids(run):
        assert not pid_alive(pid), f"process {pid} of the run survived"


def test_a_script_gets_its_arguments_its_folder_and_its_exit_code(tmp_path: Path) -> None:
    (tmp_path / "tool.py").write_text(REPORTER + "sys.exit(3)\n")
    proc = run_cli("run", "--no-native", "tool.py", "--timeout", "0", "--fixed", "-x", cwd=tmp_path)
    # Every word after the script is the script's, and it ran in the user's folder.
    assert facts(tmp_path) == {"argv": ["tool.py", "--timeout", "0", "--fixed", "-x"], "cwd": str(tmp_path),
                               "path0": str(tmp_path), "main_file": str(tmp_path / "tool.py"),
                               "main_name": "__main__", "lifeguard_loaded": False}
    # Its own exit code, nothing lifetime-related: lifeguard exits with it, and says so.
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "exited with code 3 on its own" in proc.stdout
    # Its output shown live, its escape sequences made visible, never sent raw to the terminal.
    assert "hello from the program \\x1b[31mred\\x1b[0m" in proc.stdout and "\x1b" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.json", "tool.py"]  # no lifeguard file here


def test_module_and_code_targets(tmp_path: Path) -> None:
    (tmp_path / "reporter.py").write_text(REPORTER)
    proc = run_cli("run", "--no-native", "-m", "reporter", "-q", "--report", "x", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert facts(tmp_path) == {"argv": [str(tmp_path / "reporter.py"), "-q", "--report", "x"], "cwd": str(tmp_path),
                               "path0": str(tmp_path), "main_file": str(tmp_path / "reporter.py"),
                               "main_name": "__main__", "lifeguard_loaded": False}
    code = REPORTER.replace("\\x1b", "")
    proc = run_cli("run", "--no-native", "-c", code, "one", "-v", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = facts(tmp_path)
    assert (found["argv"], found["path0"], found["cwd"], found["main_name"]) == (["-c", "one", "-v"], "",
                                                                                str(tmp_path), "__main__")


def test_an_uncaught_exception_prints_as_python_prints_it(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("def f():\n    raise ValueError('boom')\n\nf()\n")
    proc = run_cli("run", "--no-native", "boom.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # Python's own 1
    traceback = proc.stderr[proc.stderr.index("Traceback"):]
    assert traceback.splitlines()[1].startswith(f'  File "{tmp_path / "boom.py"}", line 4, in <module>'), traceback
    assert "lifeguard" not in traceback and traceback.rstrip().endswith("ValueError: boom")


def test_a_script_with_a_syntax_error_fails_as_python_says(tmp_path: Path) -> None:
    """python script.py exits 1 with its own SyntaxError; so does lifeguard run script.py (not a usage error).
    A file that names lifeguard is a scenario file, whose syntax error stays lifeguard's one line, exit 2."""
    (tmp_path / "typo.py").write_text('print("hi"\n')
    plain = subprocess.run([real_python(), "typo.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           check=False)
    proc = run_cli("run", "--no-native", "typo.py", cwd=tmp_path)
    assert proc.returncode == plain.returncode == 1, proc.stdout + proc.stderr
    assert "SyntaxError: '(' was never closed" in proc.stderr and "lifeguard: error" not in proc.stderr
    (tmp_path / "scenarios.py").write_text("import lifeguard\n\n@lifeguard.scenario()\ndef f(:\n    pass\n")
    scenario = run_cli("run", "--no-native", "scenarios.py", cwd=tmp_path)
    assert scenario.returncode == 2 and "syntax error" in scenario.stderr, scenario.stdout + scenario.stderr


def test_a_command_and_its_python(tmp_path: Path) -> None:
    (tmp_path / "tool.py").write_text(REPORTER)
    report = tmp_path / "r"
    proc = run_cli("run", "--no-native", "--report", str(report), "--", real_python(), "tool.py", "a b",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = facts(tmp_path)
    assert (found["argv"], found["cwd"], found["lifeguard_loaded"]) == (["tool.py", "a b"], str(tmp_path), False)
    run = load_report(report)["runs"][0]
    attached = [e for e in run["events"] if e["event"] == "attached"]
    assert [e["argv"][1:] for e in attached] == [["tool.py", "a b"]]  # its Python joined the run
    # A command's own exit code, through a shell: passed on.
    proc = run_cli("run", "-q", "--", "sh", "-c", "echo from the shell; exit 7", cwd=tmp_path)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "from the shell" not in proc.stdout and "exited with code 7 on its own" in proc.stdout  # -q


def test_a_program_may_run_lifeguard_itself(tmp_path: Path) -> None:
    """A CI step whose suite uses lifeguard (its plugin, its command line): the inner lifeguard is not told
    it runs inside a scenario's child, so its scenario files declare their scenarios."""
    (tmp_path / "cases.py").write_text("import lifeguard\n\n@lifeguard.scenario(timeout=20)\ndef inner_case():\n"
                                       "    pass\n")
    code = ("import subprocess, sys\n"
            "sys.exit(subprocess.run([sys.executable, '-m', 'lifeguard', 'run', '--no-native', 'cases.py'],"
            " timeout=60).returncode)\n")
    proc = run_cli("run", "--no-native", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok   inner_case[default]" in proc.stdout  # the inner session's own result line, shown live


def test_quiet_prints_results_only(tmp_path: Path) -> None:
    (tmp_path / "tool.py").write_text(REPORTER)
    proc = run_cli("run", "-q", "--no-native", "tool.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("ok   tool[default]")
    assert "hello from the program" not in proc.stdout + proc.stderr


HANG_IN_FORKED_CHILD = """
import os
import sys
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(read_end, 1)   # nobody writes: the forked child blocks here for good
    os._exit(0)
print("parent waits for", pid, flush=True)
os.waitpid(pid, 0)
"""


def test_a_shell_wrapper_around_a_python_that_hangs_in_a_forked_child(tmp_path: Path, pace: Pace) -> None:
    (tmp_path / "program.py").write_text(HANG_IN_FORKED_CHILD)
    wrapper = tmp_path / "run.sh"
    wrapper.write_text(f"#!/bin/sh\necho wrapper starts\n{shlex.quote(real_python())} program.py\necho never\n")
    wrapper.chmod(0o755)
    report = tmp_path / "r"
    proc = run_cli("run", "--timeout", pace.deadline_text(HANG_AT_LEAST), "--report", str(report), "--", "./run.sh",
                   cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    run = load_report(report)["runs"][0]
    assert (run["outcome"], run["phase"]) == ("hung", "fork-child"), run["reason"]
    forked = [e for e in run["events"] if e["event"] == "forked"]
    assert len(forked) == 1
    child = forked[0]["pid"]
    # The forked child's native stack, read live: it blocks in read(), called from os.read.
    stacks = {p["pid"]: p for p in run["backtraces"]}
    assert child in stacks and not stacks[child]["error"], stacks.get(child)
    functions = [f["function"] for t in stacks[child]["threads"] for f in t["frames"]]
    assert any(name and "read" in name for name in functions), functions
    assert any(f["is_python"] and f["file"].endswith("program.py") for t in stacks[child]["threads"]
               for f in t["frames"]), "no Python frame of program.py"
    # The whole tree was watched (the shell too) and killed, and the output shown live.
    assert len(stacks) == 3 and "wrapper starts" in proc.stdout and "parent waits for" in proc.stdout
    assert_gone(run)


CRASH_AT_EXIT_AFTER_CHDIR = """
import atexit, ctypes, os
os.mkdir("elsewhere")
os.chdir("elsewhere")              # the incident: a core landed in the project after a chdir
atexit.register(ctypes.string_at, 0)   # reads address 0 at exit: SIGSEGV in strlen
"""


def _under_unlimited_cores(*args: str, cwd: Path) -> Any:
    """lifeguard started from a shell that allows cores of any size (as a developer's shell may)."""
    return run_cli(*args, cwd=cwd, shell_setup="ulimit -c unlimited")


def cores_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("core*") if p.is_file())


def test_cores_land_in_the_run_folder_never_in_the_users(tmp_path: Path) -> None:
    (tmp_path / "crash_at_exit.py").write_text(CRASH_AT_EXIT_AFTER_CHDIR)
    report = tmp_path / "r"
    proc = _under_unlimited_cores("run", "--keep-cores", "--report", str(report), "crash_at_exit.py",
                                  cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    run = load_report(report)["runs"][0]
    assert (run["outcome"], run["phase"]) == ("crashed", "exit"), run["reason"]
    user_side = [p for p in cores_in(tmp_path) if report not in p.parents]
    assert user_side == [], user_side
    assert cores_in(Path(run["run_dir"])), "the exit crash left no core in its run folder"
    # The native frame of the crash, from that core.
    crashed = [p for p in run["backtraces"] if p["signal"]]
    frames = [f["function"] or "" for p in crashed for t in p["threads"] for f in t["frames"]]
    assert any("strlen" in name for name in frames), frames
    assert any(e["event"] == "cores-on" and e["cwd"] == str(tmp_path / "elsewhere") for e in run["events"])


COMMAND_WITHOUT_THREADING = """
import atexit, os, sys
with open("threading.txt", "w") as out:
    out.write(str("threading" in sys.modules))  # the attach hook did not import it
import ctypes  # after the look: from CPython 3.13.8 and 3.14, ctypes imports threading itself


@atexit.register  # as a decorator: register gives the function back
def first_registered():
    with open("order.txt", "a") as out:
        out.write("first ")


os.mkdir("elsewhere")
os.chdir("elsewhere")
atexit.register(ctypes.string_at, 0)   # runs before first_registered: SIGSEGV in strlen
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter without this machine's site-packages, whose .pth files may import threading themselves."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([real_python(), "-m", "venv", "--without-pip", "--clear", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def test_a_command_without_threading_is_still_seen_finalizing(tmp_path: Path, bare_python: str) -> None:
    """A command's Python is attached without importing threading for it (milliseconds of its start-up);
    the start of its finalization is then its first atexit callback, before any of the program's own."""
    (tmp_path / "tool.py").write_text(COMMAND_WITHOUT_THREADING)
    report = tmp_path / "r"
    proc = _under_unlimited_cores("run", "--keep-cores", "--report", str(report), "--", bare_python, "tool.py",
                                  cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    assert (tmp_path / "threading.txt").read_text() == "False"
    run = load_report(report)["runs"][0]
    assert (run["outcome"], run["phase"]) == ("crashed", "exit"), run["reason"]
    kinds = [e["event"] for e in run["events"]]
    assert kinds.index("body-end") < kinds.index("cores-on"), kinds
    assert not (tmp_path / "order.txt").exists()  # the crash came first, in the callback registered last
    assert [p for p in cores_in(tmp_path) if report not in p.parents] == []
    assert cores_in(Path(run["run_dir"])), "the exit crash left no core in its run folder"


THREAD_IMPORTED_LATER = """
import sys, time
assert "threading" not in sys.modules
import threading  # after the attach hook: its finder wraps threading._shutdown as the module loads
threading.Thread(target=time.sleep, args=(600,), name="never-joined").start()
"""


def test_threading_imported_by_the_program_still_shows_its_exit_wait(tmp_path: Path, bare_python: str,
                                                                       pace: Pace) -> None:
    (tmp_path / "tool.py").write_text(THREAD_IMPORTED_LATER)
    report = tmp_path / "r"
    proc = run_cli("run", "--no-native", "--timeout", str(pace.deadline(3)), "--report", str(report), "--",
                   bare_python, "tool.py", cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    run = load_report(report)["runs"][0]
    assert (run["outcome"], run["phase"]) == ("hung", "exit"), run["reason"]
    assert any(e["event"] == "body-end" for e in run["events"])
    assert_gone(run)


def test_a_crash_before_exit_in_the_users_folder_leaves_no_core(tmp_path: Path) -> None:
    (tmp_path / "crash_now.py").write_text("import ctypes\nctypes.string_at(0)\n")
    report = tmp_path / "r"
    proc = _under_unlimited_cores("run", "--report", str(report), "crash_now.py", cwd=tmp_path)
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    run = load_report(report)["runs"][0]
    assert (run["outcome"], run["phase"]) == ("crashed", "run"), run["reason"]
    assert cores_in(tmp_path) == []
    # Its stacks were read while it waited in lifeguard's handler (tests/integration/test_parked_crash.py).
    crashed = [p for p in run["backtraces"] if p.get("signal")]
    assert crashed and crashed[0]["signal"]["name"] == "SIGSEGV", run["backtraces"]
    assert not any("no core file" in note for note in run["notes"]), run["notes"]


TWO_SCENARIOS = """
import lifeguard

@lifeguard.scenario(timeout=20)
def a_fails():
    raise SystemExit(2)

@lifeguard.scenario(timeout=20)
def b_passes():
    pass
"""


def test_exitfirst_stops_at_the_first_unexpected_verdict(scenario_file: Any, tmp_path: Path) -> None:
    path = scenario_file(TWO_SCENARIOS)
    proc = run_cli("run", "-x", "-j", "1", "--report", str(tmp_path / "r"), str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = load_report(tmp_path / "r")
    assert [r["scenario"] for r in data["runs"]] == ["a_fails"] and data["stopped"] and not data["all_expected"]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "1")
    assert "skip b_passes[default]  not run: stopped at the first unexpected verdict (-x)" in proc.stdout
    assert "1 run in" in proc.stdout and "1 unexpected, stopped at the first (-x)" in proc.stdout
    everything = run_cli("run", "-j", "1", str(path))
    assert everything.returncode == 1 and "ok   b_passes[default]" in everything.stdout


# What a script's interpreter holds at its end that lifeguard's start could add, and its exit would have to tear
# down (benchmarks/fidelity.py: a longer finalization loses races a plain run has).
INTERPRETER_STATE = """
import gc, json, sys
def annotated(x: int) -> None: ...
state = {"modules": sorted(m for m in ("threading", "importlib.machinery", "resource") if m in sys.modules),
         "ast_types": any(type(o) is type and o.__module__ == "ast" for o in gc.get_objects()),
         "annotation": repr(annotated.__annotations__["x"])}
with open(sys.argv[1], "w") as out:
    json.dump(state, out)
"""


def test_a_scripts_interpreter_holds_what_a_plain_run_of_it_holds(tmp_path: Path) -> None:
    script = tmp_path / "state.py"
    script.write_text(INTERPRETER_STATE)
    subprocess.run([real_python(), str(script), str(tmp_path / "plain.json")], check=True, timeout=60)
    proc = run_cli("run", "--no-native", "state.py", str(tmp_path / "supervised.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The ast types: Python 3.12 and later make them only for compile(), which a plain script never calls.
    assert json.loads((tmp_path / "supervised.json").read_text()) == json.loads((tmp_path / "plain.json").read_text())


# Written by an object freed as the interpreter finalizes (after every atexit callback): what of lifeguard is
# left, and whether a fork still works then (Python 3.12 and later refuse one at shutdown). The program's own
# os._exit wrapper must still be there.
FINALIZING_STATE = """
import atexit, gc, json, os, sys, threading

class Witness:
    def __init__(self, out):
        # Kept here: a module's globals and the builtins may be gone when the witness is freed.
        self.out, self.modules = out, (atexit, gc, json, os, sys, threading, open, sorted, type, RuntimeError)

    def __del__(self):
        atexit, gc, json, os, sys, threading, open, sorted, type, RuntimeError = self.modules
        objects = gc.get_objects()
        state = {"modules": sorted(m.__name__ for m in objects
                                   if type(m) is type(sys) and m.__name__.startswith("lifeguard")),
                 "gc_callbacks": [f.__module__ for f in gc.callbacks],
                 "os_exit": getattr(os._exit, "__module__", None),
                 "atexit_register": getattr(atexit.register, "__module__", None),
                 "threading_shutdown": threading._shutdown.__module__, "objects": len(objects)}
        try:
            pid = os.fork()
        except RuntimeError:
            state["fork"] = "refused"
        else:
            if pid == 0:
                os._exit(0)
            state["fork"] = os.waitpid(pid, 0)[1]
        with open(self.out, "w") as f:
            json.dump(state, f)

import types  # the program's own wrapper (globals of its own: __main__'s would outlive the witness)
_exit = types.FunctionType((lambda status, real=None: real(status)).__code__, {}, "_exit", (os._exit,))
_exit.__module__, _exit.__wrapped__ = "program", os._exit  # marked as functools.wraps marks one
os._exit = _exit

witness = Witness(sys.argv[1])
"""


EXTRA_OBJECTS_AT_FINALIZATION = 200


def test_nothing_of_lifeguard_is_left_when_the_interpreter_finalizes(tmp_path: Path) -> None:
    """lifeguard takes its hooks out and drops its objects after the last atexit callback: Py_FinalizeEx
    tears down the program's objects only, as without lifeguard (benchmarks/fidelity.py)."""
    script = tmp_path / "witness.py"
    script.write_text(FINALIZING_STATE)
    plain = subprocess.run([real_python(), str(script), str(tmp_path / "plain.json")], capture_output=True,
                           text=True, check=True, timeout=60)
    proc = run_cli("run", "--no-native", "witness.py", str(tmp_path / "supervised.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    supervised = json.loads((tmp_path / "supervised.json").read_text())
    alone = json.loads((tmp_path / "plain.json").read_text())
    # What finalization has to tear down: the program's objects, and a few of the standard library's that
    # lifeguard's start loaded (about 60 here; 300 when lifeguard's own were left too).
    assert supervised.pop("objects") - alone.pop("objects") <= EXTRA_OBJECTS_AT_FINALIZATION
    assert supervised == alone, proc.stdout
    assert supervised["modules"] == [] and supervised["fork"] in (0, "refused")
    assert "Exception ignored" not in proc.stdout + proc.stderr + plain.stderr
