"""A non-editable install runs the bundled scenarios: the wheel carries them and the fixture sources.

Builds the project's wheel, installs it (without dependencies but the page's template engine) into a
fresh virtual environment, and runs `lifeguard run -k static` there from a folder that is not the
project, so nothing can come from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

from tests.helpers import ROOT, load_report, real_python

BUILD_TIMEOUT = 300.0
RUN_TIMEOUT = 300.0
# What the wheel is built from (everything pyproject.toml names).
SOURCES = ("pyproject.toml", "README.md", "lifeguard", "scenarios", "fixtures_native", "scripts")


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LIFEGUARD_FIXTURES")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def test_a_wheel_install_runs_the_bundled_scenarios(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # A copy of what the wheel is built from: the build leaves build/ and *.egg-info in its source.
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(ROOT / name, source / name)
    # pip builds in an isolated environment with the build-system requirements of pyproject.toml,
    # as any user's `pip install .` does.
    built = _run([real_python(), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
                 tmp_path, BUILD_TIMEOUT)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("lifeguard-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lifeguard/scenarios/static_destructor.py" in names
    assert "lifeguard/fixtures_native/static_destructor/function_pool.cpp" in names
    assert {"lifeguard/report/templates/report.html.j2", "lifeguard/report/templates/report.js"} <= set(names)
    assert {"lifeguard/report/templates/survey.html.j2", "lifeguard/survey/limitations.json",
            "lifeguard/survey/hooks/generic.py", "lifeguard/survey/hooks/numpy.py"} <= set(names)

    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    # Of its dependencies, `lifeguard run --report` needs only the page's template engine.
    installed = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel), "jinja2", "markupsafe"],
                     tmp_path, BUILD_TIMEOUT)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = tmp_path / "report"
    ran = _run([str(environment / "bin" / "lifeguard"), "run", "-k", "static", "--repeat", "2",
                "--report", str(report)], elsewhere, RUN_TIMEOUT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    data = load_report(report)
    assert data["all_expected"] and len(data["summaries"]) == 6
    site = str(environment.resolve())
    assert all(s["where"].startswith(site) for s in data["summaries"]), [s["where"] for s in data["summaries"]]
    assert not any(elsewhere.iterdir())  # nothing of lifeguard's lands in the user's folder
    page = (report / "report.html").read_text()  # the templates came with the wheel, and the charts need no extra
    assert "lifeguard report: all as expected" in page and 'id="rate-chart"><svg' in page
    # The command is the project's own script (not a generated wrapper), and a wrapped command gets its head start.
    assert "from lifeguard.cli.entry import main" in (environment / "bin" / "lifeguard").read_text()
    wrapped = _run([str(environment / "bin" / "lifeguard"), "run", "-v", "--", str(python), "-c", "print('hi')"],
                   elsewhere, RUN_TIMEOUT)
    assert wrapped.returncode == 0, wrapped.stdout + wrapped.stderr
    assert "hi" in wrapped.stdout and "head start of python: used" in wrapped.stderr
