"""What `pytest --lifeguard` costs a real package's unmodified test suite, against plain pytest, pytest-forked
and pytest-isolate, side by side in one run.

The suite is msgpack's own (its sdist ships test/; the extension is built from the sdist, so the tests run
against a compiled module). A private virtual environment under lifeguard's cache holds the pinned versions
below and this checkout of lifeguard; it is made on the first run (a minute: msgpack compiles).

Each round runs every variant once, in turn, so machine noise hits them alike; the median of the rounds is
kept. Each variant loads only its own tool's plugin (the others are switched off with ``-p no:NAME``; plain
pytest loads none), as that tool's users have it; pytest-xdist's plugins are loaded only in the -n 2 rows and
in one more serial --lifeguard row, printed apart (what a user with pytest-xdist installed pays). A variant's
per-test cost is (its time - plain pytest's time) / tests. Printed: the times, the per-test costs, and the
ratio of --lifeguard's per-test cost to pytest-forked's (target: at most 2), and the floor under it: a fork of
the same pytest process that does nothing but exit, through os._exit and through the interpreter's own exit
(FLOOR_PLUGIN). It also checks that --lifeguard gives the same pass/fail of every test as plain pytest, with
and without `-n 2`.

    python benchmarks/pytest_overhead.py [--rounds 5] [--figures]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from figures import record

ROOT = Path(__file__).resolve().parents[1]
MSGPACK = "msgpack==1.1.0"
PINNED = ("pytest==9.0.3", "pytest-forked==1.7.5", "pytest-isolate==0.0.17", "pytest-xdist==3.8.0")
INSTALL_TIMEOUT = 900.0
SESSION_TIMEOUT = 600.0


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lifeguard" / "bench" / f"pytest-overhead-py{sys.version_info[0]}{sys.version_info[1]}"


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, timeout=INSTALL_TIMEOUT,
                          **kwargs)  # type: ignore[call-overload]


def prepare(root: Path) -> tuple[str, Path]:
    """The venv's interpreter and the unpacked test folder (made once; lifeguard reinstalled every time)."""
    venv = root / "venv"
    python = str(venv / "bin" / "python")
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([python, "-m", "pip", "install", "-q", *PINNED])
        # From the sdist: the extension is compiled here, and the sdist is where the tests come from.
        run([python, "-m", "pip", "install", "-q", "--no-binary", "msgpack", MSGPACK])
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)])
    run([python, "-m", "pip", "install", "-q", str(ROOT)])  # lifeguard's own dependencies
    tests = root / "msgpack-tests"
    if not tests.exists():
        download = root / "sdist"
        run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(download),
             MSGPACK])
        archive = next(download.glob("msgpack-*.tar.gz"))
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/test/" in m.name and m.isfile()]
            tar.extractall(root / "unpacked", members=members, filter="data")
        unpacked = next((root / "unpacked").glob("msgpack-*/test"))
        shutil.copytree(unpacked, tests / "test")
    return python, tests


# A row's name -> its arguments. The last row is --lifeguard with pytest-xdist's plugins loaded though the
# session does not use them, as a user who has pytest-xdist installed runs a serial session: printed beside
# the others so that cost is seen, not hidden (its execnet loads OpenSSL, whose exit handler then runs in every
# forked test that exits as a process does).
XDIST_LOADED = "--lifeguard, xdist loaded"
VARIANTS: dict[str, list[str]] = {
    "plain": [],
    "--lifeguard": ["--lifeguard"],
    "--forked": ["--forked"],
    "--isolate": ["--isolate"],
    XDIST_LOADED: ["--lifeguard"],
}
# The compared tools' plugins (their pytest11 entry point names). Each variant loads only its own tool, as a
# user of that tool has it: a plugin that is installed but not asked for still costs every forked test what
# it loaded into the pytest process (pytest-isolate's filelock hooks every fork; its imports load OpenSSL,
# whose exit handler runs in a child that exits as a process does). Plain pytest loads none of them.
# pytest-xdist is the tool of the -n 2 rows: the serial rows switch its plugins off too, but for XDIST_LOADED.
TOOL_PLUGINS = {"--lifeguard": ("lifeguard",), "--forked": ("pytest_forked",), "--isolate": ("pytest_isolate",),
                "-n": ("xdist", "xdist.looponfail")}


def plugins_off(variant: str) -> list[str]:
    """``-p no:NAME`` for every compared tool but the variant's own."""
    asked = variant.replace(",", " ").split()
    if variant == XDIST_LOADED:
        asked.append("-n")
    return [arg for tool, plugins in TOOL_PLUGINS.items() if tool not in asked
            for plugin in plugins for arg in ("-p", f"no:{plugin}")]


def session(python: str, folder: Path, args: list[str], junit: Path) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args, "test"],
                   cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=SESSION_TIMEOUT, check=False)
    return time.perf_counter() - started


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / skipped, from a junit.xml."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            found[name] = "failed"
        elif case.find("skipped") is not None:
            found[name] = "skipped"
        else:
            found[name] = "passed"
    return found


# A plugin, loaded into one more --lifeguard session, that measures the floor of any tool that ends each test
# through the interpreter's own exit: at the session's end (its heap as the tests had it), it forks the pytest
# process FLOOR_FORKS times, and each child does nothing but exit, (a) with os._exit, as pytest-forked's child
# ends, and (b) through Py_Exit with the modules loaded before the session taken out of sys.modules first, as
# lifeguard's child does (atexit, module finalization of what the tests imported, C exit()). No test body, no
# supervision, no evidence: what is left is the fork and the exit.
FLOOR_FORKS = 30
FLOOR_PLUGIN = """
import ctypes, gc, os, sys, time

from lifeguard.child.forked_test import FINALIZED

before = []


def pytest_sessionstart(session):
    before[:] = [name for name in sys.modules if name not in FINALIZED]


def _fork_and_exit(real):
    gc.disable()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        if not real:
            os._exit(0)
        gc.freeze()
        kept = [sys.modules.pop(name, None) for name in before]  # alive, never finalized
        ctypes.pythonapi.Py_Exit(0)
    gc.enable()
    os.waitpid(pid, 0)
    return time.perf_counter() - started


def pytest_sessionfinish(session):
    for real in (False, True):
        times = sorted(_fork_and_exit(real) for _ in range({forks}))
        print("floor", "real" if real else "os._exit", times[len(times) // 2], file=sys.stderr)
"""


def exit_floor(python: str, folder: Path, scratch: Path) -> tuple[float, float]:
    """Seconds a test of (os._exit, the interpreter's own exit): see FLOOR_PLUGIN."""
    (scratch / "lifeguard_exit_floor.py").write_text(FLOOR_PLUGIN.format(forks=FLOOR_FORKS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(scratch), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins_off("--lifeguard"),
                           "--lifeguard", "-p", "lifeguard_exit_floor", "test"], cwd=folder, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SESSION_TIMEOUT,
                          check=False)
    found = dict(line.split()[1:] for line in done.stderr.splitlines() if line.startswith("floor "))
    return float(found.get("os._exit", "nan")), float(found.get("real", "nan"))


def per_forked(seconds: float, forked: float) -> float:
    """``seconds`` a test, in units of pytest-forked's per-test cost (``forked``)."""
    return seconds / forked if forked > 0 else float("inf")


def installed(python: str, plugin: str) -> bool:
    return subprocess.run([python, "-c", f"import {plugin}"], capture_output=True, check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--figures", action="store_true", help="record the results in docs/figures.md")
    args = parser.parse_args()
    python, folder = prepare(cache_root())
    variants = {name: extra for name, extra in VARIANTS.items()
                if name != "--isolate" or installed(python, "pytest_isolate")}
    scratch = Path(tempfile.mkdtemp(prefix="lifeguard-pytest-overhead-"))
    try:
        times: dict[str, list[float]] = {name: [] for name in variants}
        results: dict[str, dict[str, str]] = {}
        for _ in range(args.rounds):
            for name, extra in variants.items():
                junit = scratch / f"{re.sub(r'[^a-z]', '', name)}.xml"
                times[name].append(session(python, folder, [*plugins_off(name), *extra], junit))
                results[name] = outcomes(junit)
        tests = len(results["plain"])
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"msgpack's own suite ({MSGPACK}, built from its sdist): {tests} tests, "
              f"median of {args.rounds} rounds, Python {sys.version.split()[0]}")
        print(f"{'variant':<26}{'session s':>11}{'per test ms':>13}")
        cost = {}
        for name in variants:
            cost[name] = (median[name] - median["plain"]) / max(tests, 1)
            print(f"{name:<26}{median[name]:>11.2f}{cost[name] * 1000:>13.1f}")
        forked_cost = cost["--forked"]
        ratio = per_forked(cost["--lifeguard"], forked_cost)
        print(f"per-test cost of --lifeguard / --forked: {ratio:.2f} (target: at most 2)")
        # Each round's own ratio (its variants ran back to back): how far the machine's noise moves the figure.
        rounds = [(lg - plain) / (forked - plain) for lg, forked, plain
                  in zip(times["--lifeguard"], times["--forked"], times["plain"], strict=True) if forked > plain]
        print(f"  each round's ratio: {' '.join(f'{r:.2f}' for r in rounds)}")
        quick_exit, real_exit = exit_floor(python, folder, scratch)
        print(f"a fork and exit of this pytest process, nothing else: {quick_exit * 1000:.1f} ms with os._exit "
              f"(pytest-forked's end), {real_exit * 1000:.1f} ms through the interpreter's exit (lifeguard's), "
              f"{per_forked(real_exit, forked_cost):.2f} times "
              "pytest-forked's whole per-test cost")
        # Whatever else pytest-forked does for a test (pytest's own work in a process that forks, the body in
        # the child), a tool that ends each test through the interpreter's exit does too: it costs at least
        # pytest-forked's per-test cost with the os._exit fork swapped for the real-exit one.
        bound = 1 + per_forked(real_exit - quick_exit, forked_cost)
        print(f"lowest ratio to --forked of any tool that ends each test through the interpreter's exit: {bound:.2f}")
        loaded = per_forked(cost[XDIST_LOADED], forked_cost)
        print(f"per-test cost of --lifeguard with xdist's plugins loaded / --forked: {loaded:.2f}")
        same = results["--lifeguard"] == results["plain"]
        print(f"same pass/fail as plain pytest: {'yes' if same else 'NO'} "
              f"({sum(v == 'passed' for v in results['plain'].values())} passed)")
        for name, junit_args in (("-n 2 plain", ["-n", "2"]), ("-n 2 --lifeguard", ["-n", "2", "--lifeguard"])):
            junit = scratch / f"xdist-{len(junit_args)}.xml"
            seconds = session(python, folder, [*plugins_off(name), *junit_args], junit)
            results[name] = outcomes(junit)
            print(f"{name:<18} {seconds:.2f} s")
        same_xdist = results["-n 2 --lifeguard"] == results["-n 2 plain"] == results["plain"]
        print(f"same pass/fail with -n 2: {'yes' if same_xdist else 'NO'}")
        if args.figures:
            record("pytest", [
                f"msgpack's own suite, {tests} tests, median of {args.rounds} rounds: plain pytest "
                f"{median['plain']:.2f} s",
                "per-test cost over plain pytest: " + ", ".join(
                    f"`{name}` {cost[name] * 1000:.1f} ms" for name in variants if name != "plain"),
                f"`--lifeguard` / `--forked`: **{ratio:.2f}** (target at most 2; rounds: "
                f"{' '.join(f'{r:.2f}' for r in rounds)})",
                f"floor, a fork of this pytest process that only exits: {quick_exit * 1000:.1f} ms through "
                f"`os._exit` (pytest-forked's end), {real_exit * 1000:.1f} ms through the interpreter's exit; no "
                f"tool that ends each test through the interpreter's exit is below {bound:.2f}x pytest-forked's",
                f"with pytest-xdist's plugins loaded, a serial `--lifeguard` session: {loaded:.2f}x pytest-forked's",
                f"same pass/fail as plain pytest: {'yes' if same else 'NO'}; with `-n 2`: "
                f"{'yes' if same_xdist else 'NO'}"])
        return 0 if same and same_xdist else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
