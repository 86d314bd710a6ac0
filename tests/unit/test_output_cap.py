"""A child's output files stay under their cap, newest output kept."""

from __future__ import annotations

from pathlib import Path

from lifeguard.run.supervise import _cap_output


def test_output_is_capped(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"x" * 1000 + b"END")
    _cap_output(out, 100)
    data = out.read_bytes()
    assert data.endswith(b"END") and b"bytes of output dropped" in data and len(data) < 200


def test_output_under_the_cap_and_missing_files_are_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"short")
    _cap_output(out, 100)
    assert out.read_bytes() == b"short"
    _cap_output(tmp_path / "never-written.txt", 100)
    assert not (tmp_path / "never-written.txt").exists()
