"""docs/figures.md is generated: the rendering of benchmarks/figures.json, each section written by the benchmark
it names (benchmarks/figures.py), so a figure changes only by running that benchmark again."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from tests.helpers import ROOT

BENCHMARKS = ROOT / "benchmarks"


def _figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_figures", BENCHMARKS / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


figures = _figures()


def test_the_page_is_the_rendering_of_the_records() -> None:
    page = (ROOT / "docs" / "figures.md").read_text()
    assert page == figures.render(figures.load()), "docs/figures.md edited by hand: run python3 benchmarks/figures.py"


def test_every_record_is_a_section_with_its_provenance() -> None:
    records = figures.load()
    assert records, "benchmarks/figures.json holds no figures"
    for key, record in records.items():
        assert key in figures.SECTIONS, f"{key}: no such section"
        assert record["lines"] and all(isinstance(line, str) and line for line in record["lines"]), key
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]), key
        assert record["machine"] and record["command"], key


@pytest.mark.parametrize("key", list(figures.SECTIONS))
def test_each_section_is_written_by_the_benchmark_it_names(key: str) -> None:
    script = BENCHMARKS / figures.SECTIONS[key].script.split()[0]
    source = script.read_text()
    assert f'record("{key}"' in source, f"{script.name} never records {key!r}"
    assert '"--figures"' in source, f"{script.name} has no --figures option"


def test_a_recorded_section_renders_its_figures_and_provenance() -> None:
    record = {"lines": ["a figure"], "date": "2026-01-02", "machine": "2 cores", "command": "python3 x.py --figures"}
    page = figures.render({"suite": record})
    section = page.split("## The test suite")[1]
    assert "- a figure\n" in section and "Measured 2026-01-02 on 2 cores: `python3 x.py --figures`." in section
    assert "Not measured yet: `python3 benchmarks/quickstart.py --figures`." in page.split("## Per run")[0]


def test_an_unknown_section_is_refused() -> None:
    with pytest.raises(KeyError, match="no figures section"):
        figures.record("nonesuch", ["x"])
