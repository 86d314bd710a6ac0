"""The quick start's figure: the README's first command, `python3 -m lifeguard run` (every bundled scenario, both
variants), timed, with the terminal's last line.

It runs the lifeguard this interpreter imports (the README installs the checkout with `pip install -e .`),
from a temporary folder, so whatever the run writes stays out of the checkout.

    python benchmarks/quickstart.py [--figures]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from figures import record

TIMEOUT = 1800.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", action="store_true", help="record the result in docs/figures.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lifeguard-quickstart-") as folder:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "lifeguard", "run"], cwd=folder, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        took = time.perf_counter() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"python3 -m lifeguard run: exit {done.returncode} in {took:.1f} s wall; its last line: {last}")
    if done.returncode != 0:
        print(done.stdout[-4000:] + done.stderr[-4000:], file=sys.stderr)
        return 1
    if args.figures:
        record("quick-start", [f"`python3 -m lifeguard run`: `{last}`, {took:.0f} s wall, exit 0"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
