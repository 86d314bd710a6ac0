"""``lifeguard doctor``: can this machine give full evidence? Each check says what to do if not."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lifeguard.capture import find_python_gdb, gdb_available
from lifeguard.capture.cores import core_setup
from lifeguard.capture.native import available_hang_backends
from lifeguard.capture.pystack_backend import INSTALL_HINT as PYSTACK_INSTALL
from lifeguard.capture.pystack_backend import probe_pystack
from lifeguard.interpreter import Interpreter
from lifeguard.run.containment import Containment

CAP_SYS_PTRACE = 19
TOOL_TIMEOUT = 15.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = False  # without it lifeguard cannot do its main job

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.required else "warn")
        text = f"{mark} {self.name}: {self.detail}"
        if not self.ok and self.fix:
            text += f"\n       fix: {self.fix}"
        return text


def _version(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (proc.stdout or proc.stderr).strip().splitlines()
    return first[0] if proc.returncode == 0 and first else None


def check_gdb() -> Check:
    version = gdb_available()
    if version:
        return Check("gdb", True, version)
    if shutil.which("gdb"):
        return Check("gdb", False, "gdb found but without Python support",
                     "install a gdb built with Python (Debian: apt-get install gdb)")
    return Check("gdb", False, "not found: no replays under gdb (--backtrace replay), and no last-resort reader",
                 "apt-get install gdb")


def check_capture() -> Check:
    """Which back end reads a hung run's processes (the first available of HANG_BACKENDS), and
    whether it is the fast one: pystack reads native and Python frames of any CPython child in
    ~0.3 s a process where gdb takes 6-19 s once a large library such as torch is loaded."""
    backends = available_hang_backends()
    if not backends:
        return Check("native capture", False, "no back end: hangs keep faulthandler evidence only",
                     f"{PYSTACK_INSTALL} (or apt-get install elfutils / gdb)")
    names = [f"{b.name} {b.available()}" for b in backends]
    fallbacks = f"; then {', '.join(names[1:])} for a process it cannot read" if len(names) > 1 else ""
    if backends[0].name == "pystack":
        version, problem = probe_pystack()
        if version is None:
            rest = ", ".join(names[1:]) or "nothing"
            return Check("native capture", False, f"pystack is installed but its reader fails ({problem}); "
                         f"hangs are read by {rest}", f"reinstall pystack ({PYSTACK_INSTALL})")
        return Check("native capture", True, f"hangs read by {names[0]} (native and Python frames){fallbacks}; "
                     "crash cores by pystack, then gdb")
    return Check("native capture", False, f"hangs read by {names[0]}{fallbacks} (slow with large libraries loaded)",
                 f"{PYSTACK_INSTALL}: native and Python frames in ~0.3 s a process")


def check_ptrace() -> Check:
    scope_file = Path("/proc/sys/kernel/yama/ptrace_scope")
    scope = scope_file.read_text().strip() if scope_file.exists() else None
    cap = False
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                cap = bool(int(line.split()[1], 16) & (1 << CAP_SYS_PTRACE))
    except OSError:
        pass
    shown = scope if scope is not None else "absent (no Yama)"
    detail = f"ptrace_scope={shown}, CAP_SYS_PTRACE={'yes' if cap else 'no'}"
    # Children of the supervisor are attachable at scope 0/1 (gdb runs as our child's
    # sibling, so scope 1 needs the capability); scope 2 needs it too; 3 forbids all.
    ok = cap or scope in (None, "0")
    return Check("ptrace", ok, detail,
                 "run as root / with CAP_SYS_PTRACE, or sysctl kernel.yama.ptrace_scope=0 on a machine you own")


def check_cores() -> Check:
    setup = core_setup()
    return Check("core files", setup.usable, f"core_pattern={setup.pattern!r}", setup.note)


def check_compiler() -> Check:
    cc, cxx = os.environ.get("CC", "gcc"), os.environ.get("CXX", "g++")
    versions = [v for v in (_version([cc, "--version"]), _version([cxx, "--version"])) if v]
    if len(versions) == 2:
        return Check("compiler", True, f"{cc}: {versions[0]}; {cxx}: {versions[1]}")
    return Check("compiler", False, f"{cc} / {cxx} not both usable: fixtures cannot be built",
                 "apt-get install gcc g++ (or set CC / CXX)", required=True)


def check_headers(interp: Interpreter) -> Check:
    header = Path(interp.include) / "Python.h"
    if header.exists():
        return Check("Python headers", True, str(header))
    return Check("Python headers", False, f"{header} missing: fixtures cannot be built",
                 "apt-get install python3-dev (or the -dev package of your Python)", required=True)


def check_python_gdb(interp: Interpreter) -> Check:
    found = find_python_gdb(interp.executable)
    if found:
        return Check("python-gdb", True, str(found))
    return Check("python-gdb", False, "no python-gdb extension beside the interpreter: where gdb reads a process "
                 "(a replay, or what pystack cannot read) Python frames come from faulthandler dumps merged into "
                 "native stacks", "install your Python's debug/gdb support "
                 "(Debian: apt-get install python3-dbg)")


def check_membership() -> Check:
    """How runs' processes are tracked: a cgroup per run (nothing escapes it) or the subreaper (an orphan
    that drops its session and environment while its parent exits between two looks can be missed)."""
    found = Containment()
    try:
        if found.session is not None:
            return Check("membership", True, f"{found.mechanism}: a cgroup per run under {found.session.path.parent}")
        return Check("membership", False, f"subreaper with recorded ancestry ({found.why_not_cgroup})",
                     "run as root, or give lifeguard a writable cgroup (a delegated cgroup v2 subtree)")
    finally:
        found.close()


def run_checks(interp: Interpreter) -> list[Check]:
    return [check_membership(), check_capture(), check_gdb(), check_ptrace(), check_cores(), check_compiler(),
            check_headers(interp), check_python_gdb(interp)]
