"""The trivial scenario the benchmarks run: measures lifeguard, not the body."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BODY = "x = sum(range(100))"
SCENARIO = f'''
import lifeguard

@lifeguard.scenario(timeout=30, fork_server=True)
def trivial():
    {BODY}
'''


def write_scenario(folder: Path) -> Path:
    path = folder / "trivial.py"
    path.write_text(SCENARIO)
    return path
