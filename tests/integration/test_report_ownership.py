"""A report folder is lifeguard's before anything in it is emptied: new, empty, or written by an earlier
session (its lock file marks it). A folder of the user's, an empty path or a symbolic-link runs/ is refused in
one line (exit 2, or pytest's usage error), and nothing in it is touched. Without a report folder, a session's
evidence goes to a numbered folder of the user's and only the last few are kept. Real CLI and pytest sessions."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers import CLI_TIMEOUT, load_report, real_python, run_cli


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder with a runs/ of the user's own (a training run's weights)."""
    project = tmp_path / "project"
    weights = project / "runs" / "experiment-42" / "weights.bin"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"\x01" * 4096)
    return project, weights


def _one_line(proc: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "error" in line]
    for part in parts:
        assert part in line, line


def test_a_folder_of_the_users_is_refused_and_left_whole(tmp_path: Path) -> None:
    project, weights = _project(tmp_path)
    for report in (".", str(project)):
        proc = run_cli("run", "--no-native", "--report", report, "-c", "pass", cwd=project)
        _one_line(proc, "holds files lifeguard did not write (runs)", "choose a new or empty folder")
        assert weights.read_bytes() == b"\x01" * 4096
    probe = run_cli("probe", "--no-native", "--report", str(project), "json", cwd=tmp_path)
    _one_line(probe, "holds files lifeguard did not write")
    assert sorted(p.name for p in project.iterdir()) == ["runs"]


def test_an_empty_report_path_is_refused_not_the_current_folder(tmp_path: Path) -> None:
    project, weights = _project(tmp_path)
    for command in (("run", "--no-native", "--report", "", "-c", "pass"),
                    ("probe", "--no-native", "--report", "", "json")):
        proc = run_cli(*command, cwd=project)
        _one_line(proc, "--report", "an empty path")
    assert weights.exists() and sorted(p.name for p in project.iterdir()) == ["runs"]


def test_an_earlier_sessions_folder_is_reused_and_a_users_file_in_it_kept(tmp_path: Path) -> None:
    report = tmp_path / "report"
    first = run_cli("run", "--no-native", "--report", str(report), "-c", "import os; os._exit(1)")
    assert first.returncode == 1, first.stdout + first.stderr
    [failed] = [Path(run["run_dir"]) for run in load_report(report)["runs"]]
    assert (report / ".lifeguard.lock").is_file() and failed.is_dir() and failed.is_relative_to(report / "runs")
    (report / "notes.txt").write_text("mine")
    again = run_cli("run", "--no-native", "--report", str(report), "-c", "pass")
    assert again.returncode == 0, again.stdout + again.stderr
    assert load_report(report)["all_expected"] and not failed.exists()  # the earlier session's evidence, gone
    assert (report / "notes.txt").read_text() == "mine"


def test_a_symlinked_runs_folder_is_refused_and_its_target_left_whole(tmp_path: Path) -> None:
    report = tmp_path / "report"
    proc = run_cli("run", "--no-native", "--report", str(report), "-c", "pass")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "keep").mkdir(parents=True)
    (elsewhere / "keep" / "data.txt").write_text("precious")
    shutil.rmtree(report / "runs", ignore_errors=True)  # what a passing session left (an empty folder)
    (report / "runs").symlink_to(elsewhere, target_is_directory=True)
    refused = run_cli("run", "--no-native", "--report", str(report), "-c", "import os; os._exit(1)")
    _one_line(refused, "runs/ is a symbolic link")
    assert (elsewhere / "keep" / "data.txt").read_text() == "precious"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep"]


def test_the_plugin_refuses_a_folder_of_the_users(tmp_path: Path) -> None:
    project, weights = _project(tmp_path)
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    proc = subprocess.run([real_python(), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--lifeguard",
                           f"--lifeguard-report={project}", "test_one.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT, check=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert f"lifeguard: --lifeguard-report {project}: holds files lifeguard did not write (runs)" in proc.stderr
    assert weights.exists() and sorted(p.name for p in project.iterdir()) == ["runs"]


def test_sessions_without_a_report_keep_only_the_last_three_folders(tmp_path: Path) -> None:
    env = {"TMPDIR": str(tmp_path)}
    evidence = []
    for _ in range(5):
        proc = run_cli("run", "--no-native", "-c", "import os; os._exit(1)", env=env, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        evidence.append(proc.stdout)
    passing = run_cli("run", "--no-native", "-c", "pass", env=env, cwd=tmp_path)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    base = tmp_path / f"lifeguard-{os.getuid()}"
    # The passing session's own folder (session-6) went with its end: nothing in it to keep.
    assert sorted(p.name for p in base.iterdir()) == ["session-3", "session-4", "session-5"]
    assert str(base / "session-5") in evidence[-1]  # the folder the last failure's evidence was named in
    assert (base / "session-5").is_dir() and not list(tmp_path.glob("lifeguard-runs-*"))
