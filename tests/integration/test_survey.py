"""`lifeguard survey` on distributions of our own, compiled here and installed into a venv made for the test.

``lgbuggy`` keeps a Python object in a C static and releases it from a C ``atexit`` handler, after
Py_Finalize (the onnxruntime static pool): the exit probe crashes. It ships its hook through the entry point
group ``lifeguard.hooks``. ``lgclean`` is the same module without the handler. The survey runs in the venv's
interpreter (``--python``), which has no lifeguard installed: the reproduction script must crash there alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE
from lifeguard.model.outcomes import Outcome
from tests.helpers import FREE_THREADED, Pace, run_cli

NATIVE = r"""
#include <Python.h>
#include <stdlib.h>

static PyObject *kept = NULL;

#ifdef RELEASE_AT_EXIT
/* Runs from exit(), after Py_Finalize: the Py_DECREF touches a finalized interpreter. */
static void release_kept(void) { Py_XDECREF(kept); kept = NULL; }
#endif

static PyObject *keep(PyObject *self, PyObject *obj) {
    Py_XDECREF(kept);
    Py_INCREF(obj);
    kept = obj;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"keep", keep, METH_O, "keep obj until exit"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
#ifdef RELEASE_AT_EXIT
    atexit(release_kept);
#endif
    return PyModule_Create(&def);
}
"""

ENTRY_HOOK = """
def exercise(module):
    module.keep({"payload": [1, 2, 3], "owner": object()})
    return module
"""
COMPILE_TIMEOUT = 120.0
VENV_TIMEOUT = 120.0


def install(site: Path, name: str, defines: list[str], entry_hook: bool) -> None:
    """A wheel-like installation of ``name``: the package, its extension, and a dist-info with a RECORD."""
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text("from ._native import keep\n")
    source = site.parent / f"{name}.c"
    source.write_text(NATIVE)
    ext = package / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", *defines, f"-I{sysconfig.get_paths()['include']}",
                    "-o", str(ext), str(source)], check=True, timeout=COMPILE_TIMEOUT, stdin=subprocess.DEVNULL)
    (package / "notes.so.1").write_text("not a module")  # a vendored library's name: never a module
    files = [package / "__init__.py", ext, package / "notes.so.1"]
    if entry_hook:
        (package / "lifeguard_hooks.py").write_text(ENTRY_HOOK)
        files.append(package / "lifeguard_hooks.py")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_hook:
        (info / "entry_points.txt").write_text(f"[lifeguard.hooks]\n{name} = {name}.lifeguard_hooks:exercise\n")
        files.append(info / "entry_points.txt")
    files += [info / "METADATA", info / "RECORD"]
    (info / "RECORD").write_text("".join(f"{f.relative_to(site).as_posix()},,\n" for f in files))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("survey-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=VENV_TIMEOUT,
                   stdin=subprocess.DEVNULL)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, timeout=VENV_TIMEOUT).stdout.strip())
    install(site, "lgbuggy", ["-DRELEASE_AT_EXIT"], entry_hook=True)
    install(site, "lgclean", [], entry_hook=False)
    return python


@pytest.fixture(scope="module")
def timeout(pace: Pace) -> str:
    return pace.deadline_text(10)


def survey(venv: Path, report: Path, timeout: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = run_cli("survey", "--python", str(venv), "--report", str(report), "--no-native", "--timeout", timeout,
                   *args)
    data = json.loads((report / "survey.json").read_text()) if (report / "survey.json").exists() else {}
    return proc, data


def entry(data: dict, package: str, probe: str) -> dict:
    return next(e for e in data["entries"] if e["package"] == package and e["probe"] == probe)


def test_a_bug_at_exit_is_a_candidate_with_a_reproduction_that_needs_no_lifeguard(venv: Path, tmp_path: Path,
                                                                                     timeout: str) -> None:
    proc, data = survey(venv, tmp_path / "report", timeout, "lgbuggy", "lgclean", "--probe", "exit", "--probe",
                        "gc-thread")
    assert proc.returncode == EXIT_UNEXPECTED, proc.stdout + proc.stderr
    packages = {p["package"]: p for p in data["packages"]}
    assert packages["lgbuggy"]["extensions"] == ["lgbuggy._native"]  # notes.so.1 is not a module
    assert packages["lgbuggy"]["probed"] == ["lgbuggy"]
    assert packages["lgbuggy"]["skipped"] == [{"module": "lgbuggy._native",
                                               "why": "private: loaded by importing lgbuggy, which is probed"}]
    assert packages["lgbuggy"]["hook"]["source"] == "entry-point"
    assert packages["lgclean"]["hook"]["source"] == "generic"
    buggy = entry(data, "lgbuggy", "exit")
    assert buggy["triage"] == "candidate" and buggy["counts"] == {"crashed": 1}, buggy
    assert entry(data, "lgbuggy", "gc-thread")["triage"] == "candidate"
    # The generic hook calls no function that needs an argument: lgclean's keep(obj) is never called, so
    # nothing is said of lgclean, and it is not clean either.
    for probe in ("exit", "gc-thread"):
        unused = entry(data, "lgclean", probe)
        assert unused["triage"] == "not exercised" and unused["counts"] == {"not exercised": 1}, unused
        assert f"the {probe} probe used nothing of lgclean" in unused["reason"], unused
        assert [(r["exercised"], r["calls"], r["returned"]) for r in unused["exercised"]] == [(False, 0, 0)], unused
    assert [r["calls"] for r in buggy["exercised"]] == [1]  # the entry point hook's one call of keep()
    assert data["counts"] == {"clean": 0, "documented": 0, "candidate": 2, "probe-error": 0, "not exercised": 2}
    table = [line.split() for line in proc.stdout.splitlines()]
    assert ["lgbuggy", "1.0", "exit", "candidate", "1"] in [row[:5] for row in table]
    assert ["lgclean", "1.0", "exit", "not", "exercised", "1"] in [row[:6] for row in table]
    # The terminal says what survey.json says: not exercised, why, no traceback dressing it as a failure.
    assert proc.stdout.count("1 run: 1 not exercised") == 2 and "used nothing of lgclean" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout and "NotExercised" not in proc.stdout, proc.stdout
    html = (tmp_path / "report" / "survey.html").read_text()
    assert "lgbuggy" in html and "candidate" in html
    # The reproduction: plain Python in the venv (no lifeguard there, none on the path), from another folder.
    script = Path(buggy["reproduction"])
    assert script.name == "lgbuggy-exit.py" and (script.parent / "lgbuggy-exit.txt").exists()
    assert "lifeguard" not in script.read_text().split("HOOK_SOURCE")[1]  # the code after the docstring
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIFEGUARD"))}
    ran = subprocess.run([str(venv), str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=float(timeout), stdin=subprocess.DEVNULL)
    assert ran.returncode < 0 or ran.returncode == 134, (ran.returncode, ran.stderr)
    # 3.14.10 and free-threaded builds die of it silently (SIGSEGV, nothing on stderr): no message to look for.
    if sys.version_info < (3, 14) and not FREE_THREADED:
        assert "Fatal Python error" in ran.stderr or "Segmentation fault" in ran.stderr, ran.stderr
    clean = subprocess.run([str(venv), "-c", "import lifeguard"], cwd=tmp_path, env=env, capture_output=True,
                           timeout=60)
    assert clean.returncode != 0  # the venv cannot import lifeguard: the script did it alone


def test_a_documented_limitation_makes_it_documented(venv: Path, tmp_path: Path, timeout: str) -> None:
    limitations = tmp_path / "limits.json"
    limitations.write_text(json.dumps({"limitations": [
        {"package": "LGBuggy", "versions": ">=1,<2", "probe": "ex*", "link": "https://example.org/lgbuggy/exit",
         "why": "releases its pool after finalization"}]}))
    proc, data = survey(venv, tmp_path / "report", timeout, "lgbuggy", "--probe", "exit",
                        "--limitations", str(limitations))
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    found = entry(data, "lgbuggy", "exit")
    assert found["triage"] == "documented" and found["reproduction"] is None
    assert found["limitation"]["link"] == "https://example.org/lgbuggy/exit"


def test_a_hook_that_raises_is_a_probe_error_and_hooks_files_choose_modules(venv: Path, tmp_path: Path,
                                                                            timeout: str) -> None:
    hooks = tmp_path / "hooks.py"
    hooks.write_text(textwrap.dedent("""
        def broken(module):
            raise RuntimeError("the hook's own mistake")


        HOOKS = {"lgclean": broken}
        MODULES = {"lgclean": ["lgclean._native"]}
    """))
    proc, data = survey(venv, tmp_path / "report", timeout, "lgclean", "--probe", "exit", "--hooks", str(hooks))
    assert proc.returncode == EXIT_UNEXPECTED, proc.stdout + proc.stderr
    found = entry(data, "lgclean", "exit")
    assert found["module"] == "lgclean._native" and found["hook"]["source"] == "user"
    assert found["triage"] == "probe-error", found
    assert "broken raised: RuntimeError: the hook's own mistake" in found["reason"]


def test_a_package_not_installed_is_an_error_line(venv: Path, tmp_path: Path, timeout: str) -> None:
    proc, _ = survey(venv, tmp_path / "report", timeout, "lgclean", "no-such-dist")
    assert proc.returncode == EXIT_USAGE
    assert "no-such-dist is not installed in" in proc.stderr and "Traceback" not in proc.stderr


def test_every_probe_modes_reproduction_runs_alone(venv: Path, tmp_path: Path, timeout: str) -> None:
    """A reproduction script of each mode, written for the package without the bug, runs to a clean end in
    plain Python (no lifeguard in the venv); the one of the buggy package's exit still crashes."""
    from types import SimpleNamespace

    from lifeguard.model.survey import HookRef, Package
    from lifeguard.plan.probes import PROBES
    from lifeguard.survey.plan import Probed
    from lifeguard.survey.repro import write_reproduction

    hooks = tmp_path / "hooks.py"
    hooks.write_text(ENTRY_HOOK)  # the hook keeps an object through the package's native code
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIFEGUARD"))}
    seen = SimpleNamespace(phase=None, outcome=Outcome.FAILED, reason="(test)", run_dir=str(tmp_path), findings=(),
                           fatal_error="", stderr_tail="", seed=1)
    for name, clean in (("lgclean", True), ("lgbuggy", False)):
        package = Package(name, "1.0", (f"{name}._native",), (name,), (), HookRef("user", str(hooks), "exercise"))
        for mode in PROBES if clean else ("exit",):
            script = write_reproduction(tmp_path / "repro", Probed(package, name, mode), seen)  # type: ignore[arg-type]
            ran = subprocess.run([str(venv), script], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=float(timeout) * 2, stdin=subprocess.DEVNULL)
            if clean:
                assert ran.returncode == 0, (mode, ran.stdout + ran.stderr)
            else:
                assert ran.returncode < 0 or ran.returncode == 134, (mode, ran.returncode, ran.stderr)


def test_repeat_runs_each_probe_several_times(venv: Path, tmp_path: Path, timeout: str) -> None:
    hooks = tmp_path / "hooks.py"
    hooks.write_text(ENTRY_HOOK + '\nHOOKS = {"lgclean": exercise}\n')
    proc, data = survey(venv, tmp_path / "report", timeout, "lgclean", "--probe", "gc-cycle", "--repeat", "3",
                        "--hooks", str(hooks))
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert [(e["probe"], e["runs"], e["counts"], e["triage"]) for e in data["entries"]] == \
        [("gc-cycle", 3, {"passed": 3}, "clean")]
    # Each run's record: the hook's call of keep() in every round of the probe.
    assert [r["exercised"] and r["calls"] > 0 for r in data["entries"][0]["exercised"]] == [True] * 3
