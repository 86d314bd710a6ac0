"""A run the kernel's out-of-memory killer ends is named so, with the memory limit, never a native crash: a
real memory cgroup with a 100 MiB limit holds lifeguard and a program that fills 400 MiB (root only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifeguard.errors import EXIT_LIFETIME
from tests.helpers import load_report, memory_limited_cgroup, run_cli

LIMIT = 100 * 2**20


@pytest.fixture
def limited() -> Iterator[Path]:
    with memory_limited_cgroup(LIMIT, "lifeguard-test-oom") as folder:
        if folder is None:
            pytest.skip("needs root and a memory cgroup hierarchy to make a limited cgroup in")
        yield folder


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
