"""What `pytest --lifeguard` costs real packages' unmodified test suites, against plain pytest, side by side in
one run; and what it costs, and says, when one test leaves a crash for the process's exit.

The suites are the packages' own, from their sdists, run against extensions compiled from those sdists in a
private virtual environment under lifeguard's cache (made on the first run: a few minutes, the packages
compile), which holds the pinned versions below and this checkout of lifeguard.

Each round runs every row of every suite once, in turn, so machine noise hits them alike; the median of the
rounds is kept, and each round's own ratio is printed (the spread). Rows: plain pytest and `--lifeguard`
(group mode, the default), each alone and with `-n 2`; once more per suite, `--lifeguard-mode fork` (a child
per test). Every row's pass/fail/skip of every test is compared with plain pytest's.

Then a test file is added to each suite whose one test leaves a C destructor that crashes at the process's
exit (built here with the C compiler): plain pytest ends with a crash and names nothing; `--lifeguard` must
fail that test, naming the destructor, alone, with -n 2 and in fork mode, and the time it takes (the
bisection's price) is printed beside the clean session's.

    python benchmarks/pytest_overhead.py [--rounds 5] [--suites msgpack,simplejson] [--figures]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from figures import record

ROOT = Path(__file__).resolve().parents[1]
PINNED = ("pytest==9.0.3", "pytest-xdist==3.8.0")
INSTALL_TIMEOUT = 900.0
SESSION_TIMEOUT = 900.0
TARGET = 1.5  # --lifeguard's whole-session time over plain pytest's, at most


@dataclass(frozen=True)
class Suite:
    """A package built from its sdist and how its own tests are named to pytest."""

    name: str
    requirement: str
    tests_in_sdist: str  # the sdist's test folder copied out ("": the tests are installed with the package)
    module: str = ""  # --pyargs MODULE, for tests installed with the package
    ignore: str = ""  # a test file of the installed package that is not for this interpreter

    def target(self, root: Path) -> list[str]:
        if not self.module:
            return [str(root / self.name)]
        ignored = [f"--ignore={(root / 'installed' / self.module).resolve() / self.ignore}"] if self.ignore else []
        return [*ignored, "--pyargs", self.module]


SUITES = (
    Suite("msgpack", "msgpack==1.1.0", "test"),
    Suite("simplejson", "simplejson==4.3.0", "", module="simplejson"),
    Suite("ujson", "ujson==6.1.0", "tests"),
    # Its free-threading tests assert at import that the interpreter is a free-threaded build.
    Suite("bitarray", "bitarray==3.12.3", "", module="bitarray", ignore="test_free_threading.py"),
)

EXIT_CRASH_C = r"""
static int armed = 0;
void lifeguard_bench_arm(void) { armed = 1; }
__attribute__((destructor)) static void lifeguard_bench_exit_crash(void)
{
    if (armed) { volatile int *nowhere = 0; *nowhere = 1; }
}
"""
EXIT_CRASH_TEST = """
import ctypes, os


def test_leaves_a_crash_for_exit():
    ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libexitcrash.so")).lifeguard_bench_arm()
"""
CRASH_FRAME = "lifeguard_bench_exit_crash"


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lifeguard" / "bench" / f"pytest-suites-py{sys.version_info[0]}{sys.version_info[1]}"


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, timeout=INSTALL_TIMEOUT,
                          **kwargs)  # type: ignore[call-overload]


def prepare(root: Path, suites: list[Suite]) -> str:
    """The venv's interpreter, the packages built from their sdists, their test folders unpacked (made once;
    lifeguard reinstalled every time)."""
    venv = root / "venv"
    python = str(venv / "bin" / "python")
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([python, "-m", "pip", "install", "-q", *PINNED])
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)])
    run([python, "-m", "pip", "install", "-q", str(ROOT)])  # lifeguard's own dependencies
    for suite in suites:
        package = suite.requirement.partition("==")[0]
        if run([python, "-m", "pip", "list", "--format=freeze"]).stdout.find(suite.requirement) < 0:
            run([python, "-m", "pip", "install", "-q", "--no-binary", package, suite.requirement])
        if suite.tests_in_sdist and not (root / suite.name).exists():
            download = root / "sdist"
            run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(download),
                 suite.requirement])
            archive = next(download.glob(f"{package}-{suite.requirement.partition('==')[2]}.tar.gz"))
            unpacked = root / "unpacked"
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if f"/{suite.tests_in_sdist}/" in m.name and m.isfile()
                           and m.name.count("/") >= 2 and m.name.split("/")[1] == suite.tests_in_sdist]
                tar.extractall(unpacked, members=members, filter="data")
            shutil.copytree(next(unpacked.glob(f"{package}-*/{suite.tests_in_sdist}")), root / suite.name)
        if suite.module:  # root/installed/MODULE: the installed package's folder, which --ignore names
            folder = run([python, "-c", f"import os, {suite.module}; print(os.path.dirname({suite.module}.__file__))"])
            link = root / "installed" / suite.module
            link.parent.mkdir(exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(folder.stdout.strip())
    return python


def session(python: str, root: Path, suite: Suite, args: list[str], junit: Path,
            extra: tuple[str, ...] = ()) -> tuple[float, int]:
    """Seconds and exit code of one pytest session over the suite (run from an empty folder)."""
    started = time.perf_counter()
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args,
                           *suite.target(root), *extra], cwd=root / "cwd", stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=SESSION_TIMEOUT, check=False)
    return time.perf_counter() - started, done.returncode


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed / failed / skipped, the failure's message), from a junit.xml (none: {})."""
    found = {}
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return {}
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            found[name] = ("failed", f"{bad.get('message') or ''}\n{bad.text or ''}")
        elif case.find("skipped") is not None:
            found[name] = ("skipped", "")
        else:
            found[name] = ("passed", "")
    return found


def counts(found: dict[str, tuple[str, str]]) -> str:
    kinds = [kind for kind, _ in found.values()]
    return " ".join(f"{kinds.count(k)} {k}" for k in ("passed", "failed", "skipped") if kinds.count(k))


ROWS: dict[str, list[str]] = {
    "plain": [],
    "--lifeguard": ["--lifeguard"],
    "-n 2 plain": ["-n", "2"],
    "-n 2 --lifeguard": ["-n", "2", "--lifeguard"],
}
ONCE: dict[str, list[str]] = {"--lifeguard-mode fork": ["--lifeguard", "--lifeguard-mode", "fork"]}


def exit_crash_files(scratch: Path) -> Path:
    """The added test's folder, with its library compiled."""
    folder = scratch / "exitcrash"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exitcrash.c").write_text(EXIT_CRASH_C)
    (folder / "test_zz_exit_crash.py").write_text(EXIT_CRASH_TEST)
    run(["cc", "-g", "-shared", "-fPIC", "-o", str(folder / "libexitcrash.so"), str(folder / "exitcrash.c")])
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--suites", default=",".join(s.name for s in SUITES), help="comma-separated: "
                        + ", ".join(s.name for s in SUITES))
    parser.add_argument("--figures", action="store_true", help="record the results in docs/figures.md")
    args = parser.parse_args()
    chosen = [s for s in SUITES if s.name in args.suites.split(",")]
    if not chosen:
        parser.error(f"--suites: none of {args.suites!r} is one of {', '.join(s.name for s in SUITES)}")
    root = cache_root()
    try:
        python = prepare(root, chosen)
    except subprocess.CalledProcessError as exc:
        print(f"could not make the benchmark's environment: {' '.join(exc.cmd)}\n{exc.stderr}", file=sys.stderr)
        return 3
    (root / "cwd").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lifeguard-pytest-overhead-"))
    lines: list[str] = []  # for docs/figures.md: a line a suite, and one a suite with the exit crash
    ok = True

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        times: dict[tuple[str, str], list[float]] = {(s.name, row): [] for s in chosen for row in ROWS}
        results: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        for number in range(args.rounds):
            for suite in chosen:
                for row, extra in ROWS.items():
                    junit = scratch / f"{suite.name}-{number}-{row.replace(' ', '')}.xml"
                    seconds, _ = session(python, root, suite, extra, junit)
                    times[(suite.name, row)].append(seconds)
                    results[(suite.name, row)] = outcomes(junit)
        for suite in chosen:
            for row, extra in ONCE.items():
                junit = scratch / f"{suite.name}-once-{row.replace(' ', '')}.xml"
                times[(suite.name, row)] = [session(python, root, suite, extra, junit)[0]]
                results[(suite.name, row)] = outcomes(junit)
        say(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, median of {args.rounds} rounds; "
            f"ratio = the row's session time / plain pytest's (alone, or both with -n 2); target at most {TARGET}")
        say(f"{'suite':<12}{'tests':>6}  {'row':<24}{'session s':>10}{'ratio':>8}  {'rounds':<28}same counts as plain")
        for suite in chosen:
            plain = results[(suite.name, "plain")]
            parts: list[str] = []
            for row in [*ROWS, *ONCE]:
                median = statistics.median(times[(suite.name, row)])
                base_row = "-n 2 plain" if row.startswith("-n 2") else "plain"
                base = times[(suite.name, base_row)]
                ratio = median / statistics.median(base)
                spread = "" if row == base_row or row in ONCE else " ".join(
                    f"{a / b:.2f}" for a, b in zip(times[(suite.name, row)], base, strict=True))
                same = {k: v[0] for k, v in results[(suite.name, row)].items()} == {k: v[0] for k, v in plain.items()}
                ok = ok and same and bool(plain)
                if row in ("--lifeguard", "-n 2 --lifeguard") and ratio > TARGET:
                    ok = False
                say(f"{suite.name:<12}{len(plain):>6}  {row:<24}{median:>10.2f}{ratio:>8.2f}  {spread:<28}"
                    f"{'yes' if same else 'NO'} ({counts(results[(suite.name, row)])})")
                parts.append(f"`{row}` {median:.2f} s" + (f", **{ratio:.2f}x** (rounds {spread})" if spread else
                                                          f", {ratio:.2f}x" if row != base_row else "")
                             + ("" if same else " (NOT the same counts)"))
            lines.append(f"{suite.name} ({suite.requirement}, {counts(plain)}; ratio to plain pytest, with `-n 2` to "
                         f"plain `-n 2`): {'; '.join(parts)}")
        folder = exit_crash_files(scratch)
        say(f"with {folder.name}/test_zz_exit_crash.py added (its one test leaves a C destructor that crashes at "
            "exit): session time, exit code, and whether that test failed naming the destructor")
        for suite in chosen:
            clean = statistics.median(times[(suite.name, "--lifeguard")])
            parts = []
            for row, extra in (("plain", []), ("--lifeguard", ["--lifeguard"]),
                               ("-n 2 --lifeguard", ["-n", "2", "--lifeguard"]), *ONCE.items()):
                junit = scratch / f"{suite.name}-crash-{row.replace(' ', '')}.xml"
                seconds, code = session(python, root, suite, extra, junit, (str(folder),))
                found = outcomes(junit)
                crash = next((v for k, v in found.items() if k.endswith("test_leaves_a_crash_for_exit")), None)
                named = crash is not None and crash[0] == "failed" and CRASH_FRAME in crash[1]
                others = [v[0] for k, v in found.items() if not k.endswith("test_leaves_a_crash_for_exit")]
                blamed = others.count("failed") - [v[0] for v in results[(suite.name, "plain")].values()].count(
                    "failed")
                if row != "plain":
                    ok = ok and named and blamed <= 0
                price = f"{seconds / clean:.2f}x the clean --lifeguard session" if row == "--lifeguard" else ""
                say(f"{suite.name:<12}{row:<24}{seconds:>8.2f} s  exit {code:<4} "
                    f"{'named ' + CRASH_FRAME if named else 'not named'}"
                    f"{', ' + str(blamed) + ' other test(s) failed' if blamed > 0 else ''}  {price}")
                parts.append(f"`{row}` {seconds:.2f} s, exit {code}, " + (
                    "the test failed naming the destructor" if named else "the test not named")
                    + (f" ({price})" if price else "") + (f", {blamed} other test(s) failed" if blamed > 0 else ""))
            lines.append(f"{suite.name} with a test that leaves a C destructor crashing at exit: {'; '.join(parts)}")
        if args.figures:
            record("pytest", lines)
        return 0 if ok else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
