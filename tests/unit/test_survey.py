"""The survey's pure logic: module names from installed files, which modules are probed, hooks files,
limitations and triage (on results made here, no process started)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lifeguard.child.survey_inventory import module_name_of
from lifeguard.errors import SurveyError
from lifeguard.interpreter import Interpreter
from lifeguard.model.outcomes import Outcome, Phase, Verdict
from lifeguard.model.result import RunResult, SeriesSummary, Session
from lifeguard.model.survey import CANDIDATE, CLEAN, DOCUMENTED, PROBE_ERROR, HookRef, Limitation, Package
from lifeguard.survey.hooking import GENERIC, hook_for, read_hooks_file
from lifeguard.survey.inventory import requirement_names
from lifeguard.survey.limitations import BUNDLED, matching, read_limitations
from lifeguard.survey.plan import Probed
from lifeguard.survey.targets import choose_targets, public_face
from lifeguard.survey.triage import triage


@pytest.mark.parametrize(("path", "module"), [
    ("msgpack/_cmsgpack.cpython-311-x86_64-linux-gnu.so", "msgpack._cmsgpack"),
    ("ujson.cpython-311-x86_64-linux-gnu.so", "ujson"),
    ("cryptography/hazmat/bindings/_rust.abi3.so", "cryptography.hazmat.bindings._rust"),
    ("_cffi_backend.cpython-311-x86_64-linux-gnu.so", "_cffi_backend"),
    ("yaml/_yaml.cp311-win_amd64.pyd", "yaml._yaml"),
    ("numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so", None),  # auditwheel's vendored libraries
    ("numpy/core/libnpymath.so.1", None),
    ("numpy/__init__.py", None),
    ("../../bin/tool.so", None),
    ("pkg-1.0.dist-info/x.so", None),
])
def test_module_names_of_installed_files(path: str, module: str | None) -> None:
    assert module_name_of(path) == module


def test_public_faces_and_the_modules_chosen() -> None:
    assert public_face("numpy._core._multiarray_umath") == "numpy"
    assert public_face("lxml.etree") == "lxml.etree"
    assert public_face("_cffi_backend") == "_cffi_backend"
    targets, skipped = choose_targets(["lxml.etree", "lxml.objectify", "lxml._elementpath", "lxml.html.diff",
                                       "lxml.sax", "lxml.tests.test_x"])
    assert targets == ("lxml", "lxml.etree", "lxml.objectify")  # shallowest first, then extension modules
    why = {s.module: s.why for s in skipped}
    assert why["lxml.tests.test_x"] == "a test module"
    assert why["lxml._elementpath"] == "private: loaded by importing lxml, which is probed"
    assert why["lxml.sax"].startswith("over the limit of 3") and why["lxml.html.diff"].startswith("over the limit")
    targets, skipped = choose_targets(["msgpack._cmsgpack"])
    assert targets == ("msgpack",)
    assert skipped[0].why == "private: loaded by importing msgpack, which is probed"
    targets, skipped = choose_targets(["numpy._core._a", "numpy.fft._b"], named=["numpy"])
    assert targets == ("numpy",) and {s.module for s in skipped} == {"numpy._core._a", "numpy.fft._b"}


def test_a_hooks_file_is_read_not_run(tmp_path: Path) -> None:
    path = tmp_path / "hooks.py"
    path.write_text(textwrap.dedent("""
        raise SystemExit("never run by lifeguard")

        def drive(module):
            return module.Thing()

        HOOKS = {"My_Package": drive}
        MODULES = {"my-package": ["my_package._native"]}
    """))
    found = read_hooks_file(path)
    assert found["my-package"].hook == HookRef("user", str(path), "drive")
    assert found["my-package"].modules == ("my_package._native",)
    assert hook_for("my.package", found, {}).hook.source == "user"
    assert hook_for("msgpack", {}, {}).hook.source == "bundled"
    assert hook_for("no-hook-for-this", {}, {}).hook == GENERIC
    path.write_text("def f(m): pass\nHOOKS = {'x': g}\n")
    with pytest.raises(SurveyError, match="must name a function defined at the top of the file"):
        read_hooks_file(path)
    path.write_text("HOOKS = []\n")
    with pytest.raises(SurveyError, match="defines no HOOKS"):
        read_hooks_file(path)


def test_requirement_names() -> None:
    text = "# pinned\nnumpy==1.26.4\nlxml[html]>=5 ; python_version>'3'\n-r other.txt\n\nujson\n"
    assert requirement_names(text, "req.txt") == ["numpy", "lxml", "ujson"]
    with pytest.raises(SurveyError, match="req.txt:1"):
        requirement_names("==1\n", "req.txt")


def test_limitations_match_package_version_and_probe(tmp_path: Path) -> None:
    assert all(item.link.startswith("https://") for item in read_limitations(BUNDLED))
    entries = [Limitation("Foo_Bar", ">=2,<3", "fork*", "https://example.org/foo", "not fork-safe")]
    assert matching(entries, "foo-bar", "2.5", "fork") is entries[0]
    assert matching(entries, "foo-bar", "2.5", "fork-exit") is entries[0]
    assert matching(entries, "foo-bar", "3.0", "fork") is None
    assert matching(entries, "foo-bar", "2.5", "exit") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"limitations": [{"package": "x", "versions": "", "probe": "exit", "link": "", "why": ""}]}')
    with pytest.raises(SurveyError, match="link must be"):
        read_limitations(bad)


def _run(scenario: str, outcome: Outcome, phase: Phase | None, stderr: str = "") -> RunResult:
    return RunResult(scenario=scenario, variant="default", index=0, outcome=outcome, phase=phase,
                     expected="passed", signal=None, exit_code=1, duration=0.1, python="3.11.7",
                     run_dir=f"/r/{scenario}", reason=f"{outcome.value} here", stderr_tail=stderr)


def test_triage_classes() -> None:
    hook = HookRef("user", "/h/hooks.py", "drive")
    package = Package("pkg", "1.0", ("pkg._n",), ("pkg",), (), hook)
    runs = {
        "a": _run("a", Outcome.CRASHED, Phase.EXIT),
        "b": _run("b", Outcome.FAILED, Phase.IMPORT, "Traceback...\nImportError: libfoo.so: cannot open\n"),
        "c": _run("c", Outcome.FAILED, Phase.RUN, 'File "/h/hooks.py", line 3, in drive\nKeyError: \'x\'\n'),
        "d": _run("d", Outcome.HUNG, Phase.RUN),
        "e": None,
    }
    probes = {"a": "exit", "b": "exit", "c": "gc-thread", "d": "fork", "e": "exit"}
    summaries = [SeriesSummary(name, "default", "passed", 1, {(run.outcome.value if run else "passed"): 1},
                               Verdict.UNEXPECTED if run else Verdict.EXPECTED, first_failure=run)
                 for name, run in runs.items()]
    interpreter = Interpreter("/py", (3, 11, 7), "/inc", ".so", "", "", "")
    session = Session(interpreter, [], summaries=summaries)
    meaning = {name: Probed(package, "pkg", probes[name]) for name in runs}
    limits = [Limitation("pkg", "", "fork", "https://example.org/pkg/fork", "documented")]
    written = []
    entries = triage(session, meaning, limits, lambda probed, run: written.append(run.scenario) or f"/x/{run.scenario}")
    by = {entry.run_dir or "clean": entry for entry in entries}
    assert by["/r/a"].triage == CANDIDATE and by["/r/a"].reproduction == "/x/a"
    assert by["/r/b"].triage == PROBE_ERROR and "pkg failed to import: ImportError: libfoo.so" in by["/r/b"].reason
    assert by["/r/c"].triage == PROBE_ERROR and by["/r/c"].reason == "the user hook drive raised: KeyError: 'x'"
    assert by["/r/d"].triage == DOCUMENTED and by["/r/d"].limitation is limits[0]
    assert by["clean"].triage == CLEAN
    assert written == ["a"]  # only candidates get a reproduction


def test_lifeguards_own_hooks_never_put_their_folder_on_the_path() -> None:
    """hooks/pandas.py loaded by its folder would be what `import pandas` finds in the package probed (pyarrow
    imports pandas lazily): lifeguard's hooks load under a name of their own; a user's keep their folder."""
    from lifeguard.model.survey import HookRef

    own = HookRef("bundled", "/somewhere/hooks/pandas.py", "hook").spec()
    assert own["module_name"] == "lifeguard_survey_hook_pandas"
    assert HookRef("generic", "/somewhere/hooks/generic.py", "hook").spec()["module_name"]
    assert HookRef("user", "/home/me/myhooks.py", "numpy_hook").spec()["module_name"] is None


def test_the_generic_hook_skips_names_that_are_not_plain_definitions() -> None:
    """lxml.builder's E answers any attribute with a functools.partial: its __module__ is not a string."""
    import functools
    import types

    from lifeguard.survey.hooks import generic

    class ElementMaker:
        def __getattribute__(self, name: str) -> object:  # __module__ included, as lxml's compiled class does
            return functools.partial(print, name)

    module = types.ModuleType("fakepkg")
    module.E = ElementMaker()  # type: ignore[attr-defined]
    module.length = len  # type: ignore[attr-defined]  # a builtin, but defined elsewhere (builtins)
    assert generic.candidates(module) == []


def test_the_reason_of_a_hook_error_is_its_tracebacks_exception_not_a_later_warning() -> None:
    from lifeguard.survey.triage import last_error_line

    stderr = ("Traceback (most recent call last):\n  File \"hook.py\", line 12, in hook\n    server.bind(address)\n"
              "zmq.error.ZMQError: Address already in use\n"
              "sys:1: ResourceWarning: Unclosed socket\nResourceWarning: Enable tracemalloc to get the traceback\n")
    assert last_error_line(stderr) == "zmq.error.ZMQError: Address already in use"
    assert last_error_line("just a line\n") == "just a line"
