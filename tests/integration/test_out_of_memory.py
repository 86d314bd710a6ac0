"""A run the kernel's out-of-memory killer ends is named so, with the memory limit, never a native crash: a
real memory cgroup with a 100 MiB limit holds lifeguard and a program that fills 400 MiB (root only)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import load_report, run_cli

LIMIT = 100 * 2**20


def _memory_hierarchy() -> tuple[Path, tuple[str, ...]] | None:
    """A writable memory cgroup hierarchy: its mount and the limit files to write (v1, or v2 with memory)."""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for parts in mounts:
        fstype, options = parts[parts.index("-") + 1], parts[-1]
        if fstype == "cgroup" and "memory" in options.split(","):
            return Path(parts[4]), ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
    for parts in mounts:
        if parts[parts.index("-") + 1] == "cgroup2":
            mount = Path(parts[4])
            controllers = (mount / "cgroup.subtree_control")
            if controllers.exists() and "memory" in controllers.read_text().split():
                return mount, ("memory.max", "memory.swap.max")
    return None


@pytest.fixture
def limited() -> Iterator[Path]:
    found = _memory_hierarchy()
    if found is None or os.geteuid() != 0:
        pytest.skip("needs root and a memory cgroup hierarchy to make a limited cgroup in")
    mount, files = found
    folder = mount / f"lifeguard-test-oom-{os.getpid()}"
    folder.mkdir()
    try:
        for name in files:
            if (folder / name).exists():
                (folder / name).write_text(str(LIMIT))  # with swap limited too, the kernel must kill
        yield folder
    finally:
        for _ in range(500):  # its members are gone once lifeguard has exited; the kernel may take a moment
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.01)


def test_an_oom_kill_is_named_with_the_limit_not_a_crash(limited: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    proc = run_cli("run", "--no-native", "--report", str(report), "-c", "hog = b'x' * (400 * 2**20)",
                   shell_setup=f"echo $$ > {limited / 'cgroup.procs'}")
    assert proc.returncode == EXIT_LIFETIME, proc.stdout + proc.stderr
    [run] = load_report(report)["runs"]
    assert (run["outcome"], run["signal_name"]) == ("crashed", "SIGKILL")
    assert "most likely by the kernel's out-of-memory killer" in run["reason"] and run["oom_kills"] >= 1
    [finding] = run["findings"]
    assert finding["kind"] == "out-of-memory" and "not a native crash" in finding["summary"]
    assert "memory limit of lifeguard's cgroup: 100 MiB" in finding["evidence"]
    assert "[out-of-memory]" in proc.stdout and "[crash]" not in proc.stdout
