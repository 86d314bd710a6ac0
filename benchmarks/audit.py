"""The hostile-input and fault audit of the supervisor, re-run: each case tries what once escaped, was left
behind, lost runs or lied, and checks what a user must see instead. Prints one row a case and a table of
passed / tried per class.

    python benchmarks/audit.py [-k SUBSTRING]

Every case runs the real CLI in a bounded child (its own session, killed whole on timeout) and cleans up
every process it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lifeguard.errors import EXIT_LIFETIME  # noqa: E402  (a plain target run alone that escaped: a leftover)
from tests.helpers import memory_limited_cgroup  # noqa: E402

CLI_TIMEOUT = 300.0
Case = Callable[[Path], tuple[bool, str]]
CASES: list[tuple[str, str, Case]] = []


def case(group: str, name: str) -> Callable[[Case], Case]:
    def register(function: Case) -> Case:
        CASES.append((group, name, function))
        return function
    return register


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT,
        shell: str = "", before: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI in its own session; ``before`` and ``shell``: bash around it (``before`` ends in ``exec `` to keep
    lifeguard the shell's process)."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    argv = [sys.executable, "-m", "lifeguard", *args]
    command: list[str] | str = argv
    if shell or before:
        command = before + shlex.join(argv) + shell
    in_bash = isinstance(command, str)
    proc = subprocess.Popen(command, shell=in_bash, executable="/bin/bash" if in_bash else None,
                            cwd=cwd or ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        return subprocess.CompletedProcess(argv, -999, out, err + "\n[audit: timed out]")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def report(folder: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((folder / "report.json").read_text())


@contextlib.contextmanager
def read_only_folder(path: Path) -> Iterator[Path]:
    """A folder nobody can write, root included (permission bits do not stop root): a read-only tmpfs."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], check=True, timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False, timeout=30)


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


# --- escapes -------------------------------------------------------------------------------------------
ESCAPE = """
import os, subprocess, time
subprocess.Popen(["sh", "-c", "echo $$ > {pid}.tmp && mv {pid}.tmp {pid} && exec sleep 1000"],
                 start_new_session=True, env={{"PATH": "/usr/bin:/bin"}})
deadline = time.monotonic() + 20
while not os.path.exists("{pid}") and time.monotonic() < deadline:
    time.sleep(0.01)
"""
DOUBLE_FORK = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        {leaf}
    os._exit(0)
deadline = time.monotonic() + 20
while not os.path.exists("{pid}") and time.monotonic() < deadline:
    time.sleep(0.01)
"""
EXECVE = 'os.execve("/bin/sh", ["sh", "-c", "echo $$ > {pid}.tmp && mv {pid}.tmp {pid} && exec sleep 1000"], {{}})'
MEMSET = ('import ctypes; f = open("/proc/self/stat").read().rpartition(")")[2].split(); '
          'ctypes.memset(int(f[47]), 0, int(f[48]) - int(f[47])); '
          'open("{pid}.tmp", "w").write(str(os.getpid())); os.rename("{pid}.tmp", "{pid}"); time.sleep(1000)')


def _escape(tmp: Path, program: str, *options: str, env: dict[str, str] | None = None) -> tuple[bool, str]:
    pid_file = tmp / "escapee.pid"
    script = tmp / "escape.py"
    script.write_text(program.format(pid=pid_file, leaf="{leaf}"))
    done = cli("run", "--report", str(tmp / "r"), "--no-native", *options, str(script), env=env)
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    try:
        left = alive(pid) if pid else False
        return (done.returncode == EXIT_LIFETIME and pid > 0 and not left,
                f"rc {done.returncode}, escapee {'survived' if left else 'killed' if pid else 'never started'}")
    finally:
        kill_all([pid] if pid else [])


def _escape_scenario(tmp: Path, leaf_program: str, mode: str) -> tuple[bool, str]:
    pid_file = tmp / "escapee.pid"
    body = leaf_program.format(pid=pid_file, leaf="{leaf}")
    source = "import os, time\nimport lifeguard\n\n@lifeguard.scenario(timeout=30, fork_server=True)\ndef s():\n"
    source += "".join(f"    {line}\n" for line in body.strip().splitlines())
    path = tmp / "esc_scenarios.py"
    path.write_text(source)
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "--mode", mode, str(path))
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    try:
        left = alive(pid) if pid else False
        return (done.returncode == 1 and pid > 0 and not left,
                f"rc {done.returncode}, escapee {'survived' if left else 'killed' if pid else 'never started'}")
    finally:
        kill_all([pid] if pid else [])


@case("escapes", "setsid + env wipe (fresh)")
def case_1(tmp: Path) -> tuple[bool, str]:
    return _escape(tmp, ESCAPE)


@case("escapes", "setsid + env wipe (subreaper fallback)")
def case_2(tmp: Path) -> tuple[bool, str]:
    return _escape(tmp, ESCAPE, env={"LIFEGUARD_MEMBERSHIP": "subreaper"})


for _trial in range(10):
    @case("escapes", f"setsid daemon under the fork-server, try {_trial + 1}/10")
    def case_3(tmp: Path) -> tuple[bool, str]:
        return _escape_scenario(tmp, ESCAPE, "fork-server")


@case("escapes", "double fork + execve with empty env")
def case_4(tmp: Path) -> tuple[bool, str]:
    return _escape(tmp, DOUBLE_FORK.replace("{leaf}", EXECVE))


@case("escapes", "memset environment block")
def case_5(tmp: Path) -> tuple[bool, str]:
    return _escape(tmp, DOUBLE_FORK.replace("{leaf}", MEMSET))


# --- zombies ---------------------------------------------------------------------------------------------
@case("zombies", "40 runs forking 50 short orphans each")
def case_6(tmp: Path) -> tuple[bool, str]:
    script = tmp / "orphans.py"
    script.write_text("import os, time\nfor _ in range(50):\n    if os.fork() == 0:\n        if os.fork() == 0:\n"
                      "            time.sleep(0.01); os._exit(0)\n        os._exit(0)\n    os.wait()\n"
                      "time.sleep(0.05)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "-q", "--repeat", "40", str(script)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    most = 0
    while proc.poll() is None:
        most = max(most, _zombie_children(proc.pid))
        time.sleep(0.05)
    return proc.returncode == 0 and most < 100, f"rc {proc.returncode}, at most {most} zombies held at once"


def _zombie_children(pid: int) -> int:
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        count += sum(1 for kid in kids if not alive(int(kid)) and Path(f"/proc/{kid}").exists())
    return count


# --- left behind -----------------------------------------------------------------------------------------
HANGS = """
import os, time
import lifeguard

def _hang(tag):
    if os.fork() == 0:
        os.setsid()
        open(os.path.join({dir!r}, f"{{tag}}-g-{{os.getpid()}}"), "w").close()
        time.sleep(1000)
    open(os.path.join({dir!r}, f"{{tag}}-m-{{os.getpid()}}"), "w").close()
    time.sleep(1000)

@lifeguard.scenario(expect={{"default": "hung"}}, timeout=120, fork_server={fork})
def first():
    _hang("a")

@lifeguard.scenario(expect={{"default": "hung"}}, timeout=120, fork_server={fork})
def second():
    _hang("b")
"""


def _hung_session(tmp: Path, fork: bool, *options: str) -> tuple[subprocess.Popen[str], list[int]]:
    folder = tmp / "pids"
    folder.mkdir()
    path = tmp / "hangs.py"
    path.write_text(HANGS.format(dir=str(folder), fork=fork))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", str(path), "--report", str(tmp / "r"), "-j",
                             "2", "--no-native", *(["--mode", "fork-server"] if fork else []), *options],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: len(list(folder.iterdir())) == 4, 60)
    return proc, [int(p.name.rsplit("-", 1)[1]) for p in folder.iterdir()]


def _sigkill(tmp: Path, fork: bool) -> tuple[bool, str]:
    proc, pids = _hung_session(tmp, fork)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        at = time.monotonic()
        proc.communicate(timeout=10)
        gone = wait_for(lambda: not any(alive(p) for p in pids), 2.0)
        return len(pids) == 4 and gone, f"{len(pids)} processes, gone {time.monotonic() - at:.2f} s after SIGKILL"
    finally:
        kill_all(pids)


@case("left behind", "SIGKILL of lifeguard, two hung runs (fresh)")
def case_7(tmp: Path) -> tuple[bool, str]:
    return _sigkill(tmp, False)


@case("left behind", "SIGKILL of lifeguard, two hung runs (fork-server)")
def case_8(tmp: Path) -> tuple[bool, str]:
    return _sigkill(tmp, True)


def _signals(tmp: Path, signals: list[int], fork: bool = False) -> tuple[bool, str]:
    proc, pids = _hung_session(tmp, fork)
    try:
        for n, signum in enumerate(signals):
            if n:
                time.sleep(0.02)
            os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=90)
        codes = {128 + s for s in signals}
        left = [p for p in pids if alive(p)]
        has_report = (tmp / "r" / "report.json").exists()
        ok = proc.returncode in codes and not left and has_report and "Traceback" not in err
        return ok, f"rc {proc.returncode}, {len(left)} survivors, report {'written' if has_report else 'missing'}"
    finally:
        kill_all(pids)


for _first, _second in [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM),
                        (signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGHUP),
                        (signal.SIGHUP, signal.SIGINT)]:
    @case("left behind", f"{signal.Signals(_first).name} then {signal.Signals(_second).name} 20 ms apart")
    def case_9(tmp: Path, first: int = _first, second: int = _second) -> tuple[bool, str]:
        return _signals(tmp, [first, second])


for _one in (signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT):
    @case("left behind", f"{signal.Signals(_one).name} alone")
    def case_10(tmp: Path, one: int = _one) -> tuple[bool, str]:
        return _signals(tmp, [one])


@case("left behind", "SIGTERM during a long native capture")
def case_11(tmp: Path) -> tuple[bool, str]:
    ready = tmp / "ready"
    script = tmp / "many.py"
    script.write_text(f"import os, time\nfor _ in range(60):\n    if os.fork() == 0:\n        time.sleep(1000)\n"
                      f"open({str(ready)!r}, 'w').close()\ntime.sleep(1000)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--timeout", "3", "--report", str(tmp / "r"),
                             str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for(ready.exists, 30)
        time.sleep(3.5)  # the deadline passed: the capture of 61 processes is under way
        os.kill(proc.pid, signal.SIGTERM)
        at = time.monotonic()
        proc.communicate(timeout=120)
        took = time.monotonic() - at
        left = _survivors_of(script)
        return proc.returncode == 143 and not left and took < 40, \
            f"rc {proc.returncode}, exited {took:.1f} s after SIGTERM, {len(left)} survivors"
    finally:
        kill_all(_survivors_of(script))


def _survivors_of(script: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if str(script).encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return [p for p in found if p != os.getpid()]


# --- scenario files run inside the supervisor -----------------------------------------------------------
def _scenario_file(tmp: Path, top: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "hostile_scenarios.py"
    path.write_text("import lifeguard\n\n@lifeguard.scenario()\ndef ok():\n    pass\n\n" + top + "\n")
    return cli("run", "--no-native", str(path), timeout=120)


@case("scenario files", "sys.exit(main()) at the top level")
def case_12(tmp: Path) -> tuple[bool, str]:
    done = _scenario_file(tmp, "def main():\n    return 0\n\nimport sys\nsys.exit(main())")
    return done.returncode == 2 and "hostile_scenarios.py" in done.stderr, f"rc {done.returncode}"


@case("scenario files", "a segfault at the top level")
def case_13(tmp: Path) -> tuple[bool, str]:
    done = _scenario_file(tmp, "import ctypes\nctypes.string_at(0)")
    return done.returncode == 2 and "hostile_scenarios.py" in done.stderr, f"rc {done.returncode}"


@case("scenario files", "SIGTERM ignored at the top level, then SIGTERM")
def case_14(tmp: Path) -> tuple[bool, str]:
    path = tmp / "deaf_scenarios.py"
    path.write_text("import signal, time\nimport lifeguard\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n\n"
                    "@lifeguard.scenario(expect={'default': 'hung'}, timeout=60)\ndef waits():\n"
                    f"    open({str(tmp / 'up')!r}, 'w').close()\n    time.sleep(1000)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--no-native", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for((tmp / "up").exists, 60)
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)
        return proc.returncode == 143, f"rc {proc.returncode}"
    except subprocess.TimeoutExpired:
        return False, "SIGTERM ignored"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


@case("scenario files", "os.fork() at the top level")
def case_15(tmp: Path) -> tuple[bool, str]:
    marker = tmp / "forked.pid"
    done = _scenario_file(tmp, f"import os, time\nif os.fork() == 0:\n    open({str(marker)!r}, 'w')"
                               ".write(str(os.getpid()))\n    time.sleep(1000)\n    os._exit(0)")
    pid = int(marker.read_text() or 0) if marker.exists() else 0
    left = bool(pid) and wait_for(lambda: not alive(pid), 5) is False
    kill_all([pid] if pid else [])
    return not left, f"rc {done.returncode}, forked copy {'survived' if left else 'gone'}"


@case("scenario files", "a file with no scenario")
def case_16(tmp: Path) -> tuple[bool, str]:
    path = tmp / "empty_scenarios.py"
    path.write_text("import lifeguard\nx = 1\n")
    done = cli("run", str(path), timeout=120)
    return done.returncode == 2, f"rc {done.returncode}"


# --- unbounded -----------------------------------------------------------------------------------------
@case("unbounded", "560 MiB of stdout")
def case_17(tmp: Path) -> tuple[bool, str]:
    script = tmp / "floods.py"
    script.write_text("import os\nb = b'x' * (1 << 20)\nfor _ in range(560):\n    os.write(1, b)\n"
                      "raise SystemExit(1)\n")
    done = cli("run", "-q", "--report", str(tmp / "r"), "--no-native", str(script))
    run = report(tmp / "r")["runs"][0]
    size = (Path(run["run_dir"]) / "stdout.txt").stat().st_size
    return done.returncode == 1 and size <= 16 * 1024 * 1024 + 200, f"{size / 2**20:.1f} MiB kept"


@case("unbounded", "one 300 MiB line on the result channel")
def case_18(tmp: Path) -> tuple[bool, str]:
    script = tmp / "long_note.py"
    script.write_text("import lifeguard\n\n@lifeguard.scenario()\ndef noisy():\n    from lifeguard import child\n"
                      "    child.note('n' * (300 * 1024 * 1024))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--report", str(tmp / "r"), "--no-native",
                             str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    peak = 0
    while proc.poll() is None:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.05)
    sizes = sum(p.stat().st_size for p in (tmp / "r").glob("*.json*"))
    detail = f"supervisor peak {peak / 1024:.0f} MB, reports {sizes / 2**20:.1f} MB"
    return peak < 400 * 1024 and sizes < 10 * 2**20, detail


@case("unbounded", "200 processes hang, --timeout 5")
def case_19(tmp: Path) -> tuple[bool, str]:
    script = tmp / "many.py"
    script.write_text("import os, time\nfor _ in range(199):\n    if os.fork() == 0:\n        time.sleep(1000)\n"
                      "time.sleep(1000)\n")
    started = time.monotonic()
    cli("run", "-q", "--report", str(tmp / "r"), "--timeout", "5", str(script))
    took = time.monotonic() - started
    run = report(tmp / "r")["runs"][0]
    return run["outcome"] == "hung" and run["duration"] <= 35, f"run {run['duration']:.1f} s, command {took:.1f} s"


@case("unbounded", "a killed fork-server is no false hang")
def case_20(tmp: Path) -> tuple[bool, str]:
    path = tmp / "server_scenarios.py"
    path.write_text("import os, signal, time\nimport lifeguard\n\n@lifeguard.scenario(timeout=30, fork_server=True)\n"
                    "def kills_server():\n    os.kill(os.getppid(), signal.SIGKILL)\n    time.sleep(0.2)\n")
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "--mode", "fork-server", str(path))
    run = report(tmp / "r")["runs"][0]
    return done.returncode == 0 and run["outcome"] == "passed", f"rc {done.returncode}, {run['outcome']}"


# --- errors that lose runs or lie --------------------------------------------------------------------------
@case("errors", "| head -1 on a series where every run fails")
def case_21(tmp: Path) -> tuple[bool, str]:
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "--repeat", "20", "-c", "raise SystemExit(3)",
               shell=" | head -1; exit ${PIPESTATUS[0]}")
    has = (tmp / "r" / "report.json").exists() and (tmp / "r" / "results.jsonl").exists()
    return done.returncode == 1 and has, f"rc {done.returncode}, reports {'written' if has else 'missing'}"


@case("errors", "a read-only build cache")
def case_22(tmp: Path) -> tuple[bool, str]:
    with read_only_folder(tmp / "cache") as cache:
        done = cli("run", "-k", "closures_released", "--repeat", "1", "--no-native",
                   env={"LIFEGUARD_CACHE": str(cache / "sub")}, timeout=300)
    return done.returncode == 2, f"rc {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"


@case("errors", "a run that deletes its own folder (-j 2)")
def case_23(tmp: Path) -> tuple[bool, str]:
    path = tmp / "rm_scenarios.py"
    path.write_text("import os, shutil\nimport lifeguard\n\n@lifeguard.scenario()\ndef removes():\n"
                    "    shutil.rmtree(os.getcwd())\n\n@lifeguard.scenario()\ndef fine():\n    pass\n")
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "-j", "2", "--repeat", "4", str(path))
    lines = (tmp / "r" / "results.jsonl").read_text().splitlines() if (tmp / "r" / "results.jsonl").exists() else []
    return len(lines) == 8 and done.returncode in (0, 1, 3), f"rc {done.returncode}, {len(lines)}/8 runs recorded"


@case("errors", "a full disk under --report")
def case_full_disk(tmp: Path) -> tuple[bool, str]:
    small = tmp / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)], check=True, timeout=30)
    try:
        done = cli("run", "--report", str(small / "r"), "--no-native", "--repeat", "400", "-c",
                   "import sys; print('x' * 2000); sys.exit(1)")
        lines = (small / "r" / "results.jsonl").read_bytes().splitlines() if (small / "r" / "results.jsonl").exists() \
            else []
        whole = all(json.loads(line) for line in lines)
    except ValueError:
        whole = False
    finally:
        subprocess.run(["umount", str(small)], check=False, timeout=30)
    return done.returncode == 2 and whole and "Traceback" not in done.stderr, \
        f"rc {done.returncode}, {len(lines)} whole lines kept, every line parses: {whole}"


@case("errors", "timeout=nan")
def case_24(tmp: Path) -> tuple[bool, str]:
    path = tmp / "nan_scenarios.py"
    path.write_text("import lifeguard\n\n@lifeguard.scenario(timeout=float('nan'))\ndef nan():\n    pass\n")
    done = cli("run", "--no-native", str(path))
    cli_nan = cli("run", "--no-native", "--timeout", "nan", "-c", "pass")
    detail = f"rc {done.returncode} / --timeout nan rc {cli_nan.returncode}"
    return done.returncode == 2 and cli_nan.returncode == 2, detail


@case("errors", "a lone surrogate in an exception message")
def case_25(tmp: Path) -> tuple[bool, str]:
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "-c",
               "import os; raise RuntimeError(os.fsdecode(b'\\xff'))")
    junit = tmp / "r" / "junit.xml"
    try:
        ET.parse(junit)
        json.loads((tmp / "r" / "report.json").read_text())
        well = True
    except (OSError, ET.ParseError, ValueError):
        well = False
    return done.returncode == 1 and well, f"rc {done.returncode}, files {'well-formed' if well else 'broken/missing'}"


@case("errors", "ANSI colour and NUL in output")
def case_26(tmp: Path) -> tuple[bool, str]:
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "-c",
               "import sys; sys.stdout.write('\\x1b[31mred\\x00\\x0b'); sys.exit(1)")
    try:
        ET.parse(tmp / "r" / "junit.xml")
        well = True
    except (OSError, ET.ParseError):
        well = False
    raw = "\x1b[31m" in done.stdout or "\x1b[31m" in done.stderr
    return well and not raw, f"junit.xml {'well-formed' if well else 'broken'}, raw ESC on terminal: {raw}"


@case("errors", "--report is a file / read-only")
def case_27(tmp: Path) -> tuple[bool, str]:
    target = tmp / "afile"
    target.write_text("x")
    one = cli("run", "--report", str(target), "--no-native", "-c", "pass")
    with read_only_folder(tmp / "ro") as ro:
        two = cli("run", "--report", str(ro / "sub"), "--no-native", "-c", "pass")
    ok = one.returncode == 2 and two.returncode == 2 and "Traceback" not in one.stderr + two.stderr
    return ok, f"file: rc {one.returncode}; read-only: rc {two.returncode}"


@case("errors", "two scenarios named alike (same / case 1 vs case_1)")
def case_28(tmp: Path) -> tuple[bool, str]:
    (tmp / "a_scenarios.py").write_text("import lifeguard\n\n@lifeguard.scenario()\ndef same():\n    pass\n")
    (tmp / "b_scenarios.py").write_text("import lifeguard\n\n@lifeguard.scenario()\ndef same():\n    pass\n")
    done = cli("run", "--no-native", str(tmp / "a_scenarios.py"), str(tmp / "b_scenarios.py"))
    (tmp / "c_scenarios.py").write_text("import lifeguard\n\n@lifeguard.scenario(name='case 1')\ndef a():\n    pass\n\n"
                                        "@lifeguard.scenario(name='case_1')\ndef b():\n    pass\n")
    second = cli("run", "--no-native", str(tmp / "c_scenarios.py"))
    return done.returncode == 2 and second.returncode == 2, f"rc {done.returncode} / {second.returncode}"


@case("errors", "two lifeguards writing one --report folder")
def case_29(tmp: Path) -> tuple[bool, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--report", str(tmp / "r"), "--no-native",
                              "--timeout", "60", "-c", f"import time; open({str(tmp / 'up')!r}, 'w'); time.sleep(5)"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for((tmp / "up").exists, 60)
        second = cli("run", "--report", str(tmp / "r"), "--no-native", "-c", "pass")
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(30)
    return second.returncode == 2, f"second: rc {second.returncode}"


@case("errors", "an async def body")
def case_30(tmp: Path) -> tuple[bool, str]:
    path = tmp / "async_scenarios.py"
    path.write_text("import lifeguard\n\n@lifeguard.scenario()\nasync def coro():\n    raise RuntimeError('ran')\n")
    done = cli("run", "--no-native", str(path))
    return done.returncode in (1, 2), f"rc {done.returncode} (0 would be a body passed without running)"


@case("errors", "a stopped process is called stopped")
def case_31(tmp: Path) -> tuple[bool, str]:
    done = cli("run", "--report", str(tmp / "r"), "--timeout", "3", "-c",
               "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)")
    text = json.dumps(report(tmp / "r")["runs"][0].get("findings", []))
    return "stopped" in text, f"rc {done.returncode}, findings {'say stopped' if 'stopped' in text else text[:80]}"



def _users_project(tmp: Path) -> Path:
    weights = tmp / "project" / "runs" / "experiment-42" / "weights.bin"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"w" * 4096)
    return weights


@case("ownership", "--report . in a project with its own runs/")
def case_report_dot(tmp: Path) -> tuple[bool, str]:
    weights = _users_project(tmp)
    done = cli("run", "--report", ".", "--no-native", "-c", "pass", cwd=weights.parents[2])
    kept = weights.exists() and weights.stat().st_size == 4096
    return done.returncode == 2 and kept, f"rc {done.returncode}, the user's weights {'kept' if kept else 'DELETED'}"


@case("ownership", "--report '' (an empty path)")
def case_report_empty(tmp: Path) -> tuple[bool, str]:
    weights = _users_project(tmp)
    done = cli("run", "--report", "", "--no-native", "-c", "pass", cwd=weights.parents[2])
    made = sorted(p.name for p in weights.parents[2].iterdir())
    return done.returncode == 2 and made == ["runs"], f"rc {done.returncode}, the folder holds {made}"


@case("ownership", "a report folder whose runs/ is a symbolic link")
def case_report_symlinked_runs(tmp: Path) -> tuple[bool, str]:
    first = cli("run", "--report", str(tmp / "r"), "--no-native", "-c", "pass")
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "data.txt").write_text("precious")
    subprocess.run(["rm", "-rf", str(tmp / "r" / "runs")], check=True, timeout=30)
    (tmp / "r" / "runs").symlink_to(tmp / "elsewhere")
    done = cli("run", "--report", str(tmp / "r"), "--no-native", "-c", "import os; os._exit(1)")
    kept = (tmp / "elsewhere" / "data.txt").exists()
    ok = first.returncode == 0 and done.returncode == 2 and kept
    return ok, f"rc {done.returncode}, target {'kept' if kept else 'EMPTIED'}"


def _two_shards(tmp: Path) -> list[Path]:
    plan = tmp / "plan.py"
    plan.write_text("import os, signal, atexit\nimport lifeguard\n\n"
                    "@lifeguard.scenario(expect={'default': 'crashed@exit'}, repeat=2)\n"
                    "def boom():\n    atexit.register(os.kill, os.getpid(), signal.SIGSEGV)\n")
    shards = [tmp / f"shard-{k}" for k in (1, 2)]
    for k, shard in enumerate(shards, 1):
        cli("run", str(plan), "--shard", f"{k}/2", "--no-native", "-q", "--report", str(shard))
    return shards


def _merge_and_find(tmp: Path, shards: list[Path], name: str) -> tuple[int, int]:
    """Merge ``shards`` into tmp/out: the exit code, and how many files named ``name`` the merge wrote."""
    done = cli("merge", *map(str, shards), "--report", str(tmp / "out"))
    return done.returncode, len(list((tmp / "out").rglob(name)))


@case("ownership", "merge: a shard names a run folder outside it")
def case_merge_outside(tmp: Path) -> tuple[bool, str]:
    shards = _two_shards(tmp)
    (tmp / "secret").mkdir()
    (tmp / "secret" / "key.txt").write_text("the secret")
    line = json.loads((shards[0] / "results.jsonl").read_text().splitlines()[0])
    (shards[0] / "results.jsonl").write_text(json.dumps({**line, "run_dir": str(tmp / "secret")}) + "\n")
    code, leaked = _merge_and_find(tmp, shards, "key.txt")
    return code in (0, 1) and not leaked, f"rc {code}, {leaked} file(s) copied from outside"


@case("ownership", "merge: a symbolic link in a shard's run folder")
def case_merge_symlink(tmp: Path) -> tuple[bool, str]:
    shards = _two_shards(tmp)
    (tmp / "key.txt").write_text("the secret")
    run_dir = Path(json.loads((shards[0] / "results.jsonl").read_text().splitlines()[0])["run_dir"])
    (run_dir / "leak.txt").symlink_to(tmp / "key.txt")
    code, leaked = _merge_and_find(tmp, shards, "leak.txt")
    return code in (0, 1) and not leaked, f"rc {code}, {leaked} link(s) followed"


@case("ownership", "merge: a cut last line, a shard of 1/99999999999")
def case_merge_malformed(tmp: Path) -> tuple[bool, str]:
    shards = _two_shards(tmp)
    with open(shards[0] / "results.jsonl", "a") as results:
        results.write('{"scenario": "boom", "vari')
    cut = cli("merge", *map(str, shards), "--report", str(tmp / "out"))
    head = json.loads((shards[1] / "report.json").read_text())
    (shards[1] / "report.json").write_text(json.dumps({**head, "shard": "1/99999999999"}))
    huge = cli("merge", str(shards[1]), "--report", str(tmp / "out2"))
    ok = cut.returncode == huge.returncode == 2 and "Traceback" not in cut.stderr + huge.stderr
    return ok, f"cut line: rc {cut.returncode}; huge shard count: rc {huge.returncode}"


@case("inputs", "a FIFO target, /dev/zero")
def case_not_regular(tmp: Path) -> tuple[bool, str]:
    os.mkfifo(tmp / "pipe.py")
    fifo = cli("run", "--no-native", str(tmp / "pipe.py"), timeout=60)
    zero = cli("run", "--no-native", "/dev/zero", timeout=60)
    return fifo.returncode == zero.returncode == 2, f"FIFO: rc {fifo.returncode}; /dev/zero: rc {zero.returncode}"


@case("inputs", "a script name that is not UTF-8")
def case_not_utf8(tmp: Path) -> tuple[bool, str]:
    (tmp / os.fsdecode(b"s\xff.py")).write_text("import os\nos._exit(1)\n")
    done = cli("run", "--no-native", "--report", str(tmp / "r"), os.fsdecode(b"s\xff.py"), cwd=tmp)
    return done.returncode == 1 and "Traceback" not in done.stderr, f"rc {done.returncode}"


@case("inputs", "20,000 arguments to a plain script")
def case_many_arguments(tmp: Path) -> tuple[bool, str]:
    (tmp / "count.py").write_text("import sys\nprint('got', len(sys.argv) - 1)\n")
    done = cli("run", "--no-native", str(tmp / "count.py"), *(f"argument-{n}" for n in range(20_000)))
    return done.returncode == 0 and "got 20000" in done.stdout, f"rc {done.returncode}"


@case("inputs", "-j 10**20, --repeat of 400 digits, -k 5,000 deep, passed@exit")
def case_bounds(tmp: Path) -> tuple[bool, str]:
    tries = [("-j", "9" * 20), ("--repeat", "9" * 400), ("-k", "(" * 5000 + "a" + ")" * 5000),
             ("--expect", "passed@exit"), ("--timeout", "1e300")]
    codes = [cli("run", "--no-native", *args, "-c", "pass", timeout=60).returncode for args in tries]
    return codes == [2] * len(tries), f"rc {codes}"


@case("inputs", "a current folder that was deleted")
def case_deleted_folder(tmp: Path) -> tuple[bool, str]:
    gone = tmp / "gone"
    gone.mkdir()
    done = cli("run", "--no-native", "-c", "pass", before=f"cd {gone} && rmdir {gone} && exec ")
    ok = done.returncode == 2 and "Traceback" not in done.stderr and "no longer exists" in done.stderr
    return ok, f"rc {done.returncode}"


@case("inputs", "timeout=10**400, repeat=10**20 in @scenario")
def case_decorator_bounds(tmp: Path) -> tuple[bool, str]:
    codes = []
    for value in ("timeout=10**400", "repeat=10**20"):
        (tmp / "big.py").write_text(f"import lifeguard\n\n@lifeguard.scenario({value})\ndef big():\n    pass\n")
        done = cli("run", "--no-native", str(tmp / "big.py"), timeout=60)
        codes.append(done.returncode if "Traceback" not in done.stderr else -1)
    return codes == [2, 2], f"rc {codes}"


def _cgroup_base() -> Path | None:
    sys.path.insert(0, str(ROOT))
    from lifeguard.proc import cgroups

    return next((h.base for h in cgroups.find_hierarchies() if os.access(h.base, os.W_OK)), None)


@case("escapes", "a daemon written into another cgroup's cgroup.procs")
def case_moved_daemon(tmp: Path) -> tuple[bool, str]:
    base = _cgroup_base()
    if base is None:
        return False, "no writable cgroup hierarchy"
    pid_file = tmp / "daemon.pid"
    program = (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               f"        open({str(base / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
               f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n        time.sleep(1000)\n"
               f"    os._exit(0)\nwhile not os.path.exists({str(pid_file)!r}):\n    time.sleep(0.01)\n"
               f"time.sleep(0.1)\n")
    done = cli("run", "--no-native", "-c", program, env={"LIFEGUARD_MEMBERSHIP": "cgroup"})
    daemon = int(pid_file.read_text() or 0) if pid_file.exists() else 0
    left = daemon > 0 and alive(daemon)
    kill_all([daemon] if left else [])
    ok = done.returncode == EXIT_LIFETIME and not left
    return ok, f"rc {done.returncode}, daemon {'ALIVE' if left else 'killed'}"


def _dies_with_lifeguard(target: list[str], membership: str, pid_file: Path) -> bool:
    """Run ``target`` under lifeguard until the process it names in ``pid_file`` is up, give the supervisor a
    second of looks, SIGKILL lifeguard alone: is that process gone within 5 s?"""
    env = dict(os.environ, PYTHONPATH=str(ROOT), LIFEGUARD_MEMBERSHIP=membership)
    supervisor = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--no-native", "--timeout", "120",
                                   *target], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    pid = 0
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 60)
        pid = int(pid_file.read_text())
        time.sleep(1.0)  # the supervisor's next looks (four a second)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(30)
        return wait_for(lambda: not alive(pid), 5)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(supervisor.pid, signal.SIGKILL)
        kill_all([pid] if pid else [])


@case("left behind", "a run kills the watchdog, then lifeguard is SIGKILLed")
def case_watchdog_killed(tmp: Path) -> tuple[bool, str]:
    ready = tmp / "ready"
    program = (f"import os, signal, time\n"
               f"for p in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
               f"    try:\n        argv = open(f'/proc/{{p}}/cmdline', 'rb').read()\n"
               f"        ppid = int(open(f'/proc/{{p}}/stat').read().rpartition(')')[2].split()[1])\n"
               f"    except (OSError, ValueError):\n        continue\n"
               f"    if b'watchdog' in argv and ppid == os.getppid():\n        os.kill(int(p), signal.SIGKILL)\n"
               f"if os.fork() == 0:\n    os.setsid()\n    open({str(ready)!r}, 'w').write(str(os.getpid()))\n"
               f"    time.sleep(1000)\ntime.sleep(1000)\n")
    gone = _dies_with_lifeguard(["-c", program], "cgroup", ready)
    return gone, f"grandchild {'killed' if gone else 'ALIVE'} after lifeguard's SIGKILL"


@case("left behind", "a setsid, env-wiped daemon of a run tracked by ancestry, then SIGKILL")
def case_ancestry_daemon(tmp: Path) -> tuple[bool, str]:
    pid_file = tmp / "daemon.pid"
    program = (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               f"        os.execve('/bin/sh', ['sh', '-c', 'echo $$ > {pid_file} && exec sleep 1000'], {{}})\n"
               f"    os._exit(0)\ntime.sleep(1000)\n")
    gone = _dies_with_lifeguard(["--", sys.executable, "-c", program], "subreaper", pid_file)  # as pytest's runs
    return gone, f"daemon {'killed' if gone else 'ALIVE'} after lifeguard's SIGKILL"


def run_pytest(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``tmp`` with this checkout's plugin (the installed entry point names its
    module, found first on PYTHONPATH), bounded like cli()."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTEST_ADDOPTS="-p no:cacheprovider -p no:xdist")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=tmp,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        return subprocess.CompletedProcess(proc.args, -999, out, err + "\n[audit: timed out]")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@case("plugin", "pytest --lifeguard: a fixture patches os.fork")
def case_patched_fork(tmp: Path) -> tuple[bool, str]:
    (tmp / "test_patched.py").write_text("import os, pytest\n\n@pytest.fixture(autouse=True)\n"
                                         "def no_fork(monkeypatch):\n    monkeypatch.setattr(os, 'fork', None)\n\n"
                                         "def test_a():\n    pass\n")
    done = run_pytest(tmp, "--lifeguard", "-q")
    return done.returncode == 0 and "1 passed" in done.stdout, f"rc {done.returncode}"


@case("plugin", "pytest --lifeguard: a fixture segfaults in its teardown")
def case_teardown_segfault(tmp: Path) -> tuple[bool, str]:
    (tmp / "test_teardown.py").write_text("import ctypes, pytest\n\n@pytest.fixture\ndef crashes():\n    yield\n"
                                          "    ctypes.string_at(0)\n\ndef test_a(crashes):\n    pass\n\n"
                                          "def test_b():\n    pass\n")
    done = run_pytest(tmp, "--lifeguard", "-q", "--junitxml=junit.xml")
    junit = tmp / "junit.xml"
    suite = ET.parse(junit).getroot().find("testsuite") if junit.is_file() else None
    errors = suite.get("errors") if suite is not None else None
    ok = done.returncode == 1 and "2 passed, 1 error" in done.stdout and errors == "1"
    return ok, f"rc {done.returncode}, junit.xml errors {errors}"


@case("errors", "an out-of-memory kill in a 100 MiB memory cgroup")
def case_oom(tmp: Path) -> tuple[bool, str]:
    with memory_limited_cgroup(100 * 2**20, "lifeguard-audit-oom") as folder:
        if folder is None:
            return False, "needs root and a memory cgroup hierarchy"
        proc = cli("run", "--no-native", "--report", str(tmp / "r"), "-c", "hog = b'x' * (400 * 2**20)",
                   before=f"echo $$ > {folder / 'cgroup.procs'} && exec ")
    runs = report(tmp / "r")["runs"] if (tmp / "r" / "report.json").exists() else []
    kinds = [finding["kind"] for finding in runs[0]["findings"]] if runs else []
    ok = proc.returncode == EXIT_LIFETIME and kinds == ["out-of-memory"] and "[crash]" not in proc.stdout
    return ok, f"rc {proc.returncode}, findings {kinds}"


@case("ownership", "a lifeguard in a PID namespace beside a live one")
def case_pid_namespace(tmp: Path) -> tuple[bool, str]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False, "needs root and unshare"
    started = tmp / "started"
    env = dict(os.environ, PYTHONPATH=str(ROOT), LIFEGUARD_MEMBERSHIP="cgroup")
    program = f"import os, time\nopen({str(started)!r}, 'w').write(str(os.getpid()))\ntime.sleep(8)\n"
    outside = subprocess.Popen([sys.executable, "-m", "lifeguard", "run", "--no-native", "-c", program], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               stdin=subprocess.DEVNULL)
    try:
        if not wait_for(lambda: started.exists() and started.read_text() != "", 60):
            return False, "the outside run never started"
        inside = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "lifeguard",
                                 "run", "--no-native", "-c", "pass"], env=env, capture_output=True, text=True,
                                timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL)
        survived = alive(int(started.read_text()))
        out, err = outside.communicate(timeout=CLI_TIMEOUT)
        ok = inside.returncode == 0 and survived and outside.returncode == 0
        return ok, (f"inside rc {inside.returncode}, outside run {'alive' if survived else 'KILLED'}, "
                    f"outside rc {outside.returncode}")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(outside.pid, signal.SIGKILL)
        outside.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    totals: dict[str, list[int]] = {}
    for group, name, function in CASES:
        if args.k and args.k not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="lifeguard-audit-") as tmp:
            started = time.monotonic()
            try:
                ok, detail = function(Path(tmp))
            except Exception as exc:  # a case's own failure counts as a failed case, the audit goes on
                ok, detail = False, f"{type(exc).__name__}: {exc}"
        counts = totals.setdefault(group, [0, 0])
        counts[0] += ok
        counts[1] += 1
        print(f"{'pass' if ok else 'FAIL'}  {group:15} {name:55} {detail}  ({time.monotonic() - started:.1f} s)",
              flush=True)
    print("\n| class | passed / tried |\n|---|---|")
    for group, (passed, tried) in totals.items():
        print(f"| {group} | {passed} / {tried} |")
    passed, tried = sum(c[0] for c in totals.values()), sum(c[1] for c in totals.values())
    print(f"| all | {passed} / {tried} |")
    return 0 if passed == tried else 1


if __name__ == "__main__":
    sys.exit(main())
