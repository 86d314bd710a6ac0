"""The shell commands of the docs, run as a reader would run them.

Every command line in a checked block of README.md and docs/ (tests/unit/test_docs.py checks each against
the real parsers) is, here, one of:
- RUN: run for real with bash in a small project made for it (the files the commands name: a script, a
  reproduction, a CI script, a tests folder, a module and its hook, a scenario file, `.venv/bin/python`, the
  checkout's `scenarios/`), which must exit 0 and show what the docs say it does;
- ELSEWHERE: run by another part of CI, named (the suite itself, the lint test, the site build);
- NOT_RUN: with why (minutes of both cores, third-party packages); these stay checked by the unit test.
A command in none of them fails, so a new example is classified when it is written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.unit.test_docs import MARKDOWN, SHELL_INFO, command_lines, fenced_blocks

COMMAND_TIMEOUT = 240.0  # the slowest here, a rebuild of every fixture, takes about 12 s on a quiet machine


@dataclass(frozen=True)
class Run:
    shows: tuple[str, ...] = ()  # text the terminal must show
    own_cache: bool = False  # a fresh LIFEGUARD_CACHE: the command rebuilds what other tests use


RUN: dict[str, Run] = {
    "lifeguard run path/to/script.py --its --own args": Run(("1 run in", "all as expected")),
    "lifeguard run --expect crashed@exit repro.py": Run(("during an atexit callback", "all as expected")),
    "lifeguard run --timeout 1800 -m pytest -x tests/": Run(("1 passed", "all as expected")),
    "lifeguard run --timeout 600 -- ./ci/test.sh": Run(("all as expected",)),
    "lifeguard run -c 'import myext; myext.start_threads()' arg1": Run(("all as expected",)),
    "lifeguard run my_scenarios.py::my_case --python .venv/bin/python --timeout 20":
        Run(("my_case", "all as expected")),
    "lifeguard list": Run(("request_thread_collects_by_chance",)),
    "lifeguard doctor": Run(("ok   core files",)),
    "lifeguard build --force": Run(("gc_channel[buggy] built",), own_cache=True),
    "pytest --lifeguard": Run(("1 passed",)),
    "pytest --lifeguard -n auto --lifeguard-report lifeguard-report": Run(("1 passed", "lifeguard: report of 1 run")),
    "lifeguard probe mypkg._native --hook tests/hooks.py:exercise --probe exit --probe fork-use --probe gc-thread":
        Run(("exit       clean", "fork-use   clean", "gc-thread  clean")),
    "lifeguard run scenarios/gc_channel.py::request_thread_collects_by_chance --variant buggy --until-fail "
    "--perturb gc-thread,switch-interval":
        Run(("corrupted", "all as expected")),
    # A scenario that fails every run: a replayed race (a `sometimes:` one) may pass, as the docs say.
    "lifeguard run --seed 2973112 --variant buggy scenarios/gc_channel.py::gc_thread_frees_dref_mid_call":
        Run(("1 run: 1 corrupted", "all as expected")),
}
ELSEWHERE: dict[str, str] = {
    "python3 -m pip install -e '.[test]' && python3 -m pytest -q": ".ci/run runs this very command",
    "python3 -m pip install -e '.[test]'": ".ci/run",
    "python3 -m pytest -q": ".ci/run (the suite)",
    "sudo bash scripts/py314-chroot.sh test": ".ci/run (CPython 3.14)",
    "python3 -m pytest -q tests/unit": ".ci/run (a part of the suite)",
    "ruff check . && mypy lifeguard": "tests/integration/test_lint.py",
    "python3 -m mkdocs build --strict": "tests/unit/test_docs.py::test_the_site_builds_with_strict",
}
NOT_RUN: dict[str, str] = {
    "python3 -m pip install -e . && python3 -m lifeguard run":
        "every bundled scenario, about a minute of both cores: benchmarks/quickstart.py runs it",
    "lifeguard run -x -q scenarios/": "every bundled scenario, about a minute of both cores",
    'lifeguard run scenarios/ -k "fork and not exit" --repeat 200 -j 2 --report out/':
        "800 runs, minutes of both cores (the buggy variants hang until their deadline)",
    "lifeguard run scenarios/ --variant fixed --duration 600 -j 2": "ten minutes, by design",
    "lifeguard survey numpy msgpack --python .venv/bin/python --report survey-out":
        "surveys two third-party packages the test environment need not have (tests/integration/test_survey.py "
        "surveys packages of its own)",
    "lifeguard survey --tests msgpack --python .venv/bin/python --budget 120 --report suites-out":
        "fetches a third-party package's source distribution and runs its suite (tests/integration/"
        "test_suite_probes.py surveys a library of its own through its tests)",
}

COMMENT = re.compile(r"\s+#.*$")


def docs_commands() -> list[str]:
    """Every command line of the checked blocks, its trailing comment cut, each once."""
    found: dict[str, None] = {}
    for path in MARKDOWN:
        for block in fenced_blocks(path):
            if block.info in SHELL_INFO and not block.illustrative:
                for line in command_lines(block):
                    found[COMMENT.sub("", line).strip()] = None
    return list(found)


def test_every_docs_command_is_run_or_says_why_not() -> None:
    commands = docs_commands()
    unclassified = [c for c in commands if c not in RUN and c not in ELSEWHERE and c not in NOT_RUN]
    assert not unclassified, f"classify these docs commands in {__name__}: {unclassified}"
    gone = [c for c in (*RUN, *ELSEWHERE, *NOT_RUN) if c not in commands]
    assert not gone, f"no longer in the docs: {gone}"
    assert len(RUN) > len(NOT_RUN) + len(ELSEWHERE)


SCRIPT = "import json, sys\njson.dump(sys.argv[1:], open('script-args.json', 'w'))\n"
PROJECT = {
    "path/to/script.py": SCRIPT,
    "repro.py": "import atexit, os\n\natexit.register(os.abort)  # a crash at exit\n",
    "ci/test.sh": "#!/bin/sh\necho ci ok\n",
    "tests/test_ok.py": "def test_ok():\n    assert 1 + 1 == 2\n",
    "tests/hooks.py": "def exercise(module):\n    return [module.work(i) for i in range(3)]\n",
    "mypkg/__init__.py": "",
    "mypkg/_native.py": "def work(n):\n    return n * 2\n",
    "myext.py": "import threading\n\n\ndef start_threads():\n    worker = threading.Thread(target=print)\n"
                "    worker.start()\n    worker.join()\n",
    "my_scenarios.py": "import lifeguard\n\n\n@lifeguard.scenario()\ndef my_case():\n    assert sum(range(10)) == 45\n",
}


def make_project(folder: Path) -> None:
    for name, text in PROJECT.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "ci" / "test.sh").chmod(0o755)
    (folder / ".venv" / "bin").mkdir(parents=True)
    (folder / ".venv" / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (folder / "scenarios").symlink_to(ROOT / "scenarios")


@pytest.mark.timeout(COMMAND_TIMEOUT + 30)
@pytest.mark.parametrize("command", list(RUN))
def test_a_docs_command_runs_as_the_docs_say(command: str, tmp_path: Path) -> None:
    expected = RUN[command]
    make_project(tmp_path)
    # The interpreter's own bin first: `lifeguard`, `pytest` and `python3` are this checkout's installation.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if expected.own_cache:
        env["LIFEGUARD_CACHE"] = str(tmp_path / "cache")
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{out[-4000:]}"
    for text in expected.shows:
        assert text in out, f"{command}: {text!r} not shown\n{out[-4000:]}"
    if command.startswith("lifeguard run path/to/script.py"):  # every word after a plain target is its own
        assert json.loads((tmp_path / "script-args.json").read_text()) == ["--its", "--own", "args"]
