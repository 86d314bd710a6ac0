"""Readable names for Rust (and left-over C++) symbols a back end gave mangled.

pystack demangles C++ but leaves Rust's v0 symbols (``_RNvMs3_...10rayon_core5latch...``) as they are;
findings and their runtime table need ``<rayon_core::latch::LockLatch>::wait_and_reset``. binutils'
c++filt knows both manglings; every mangled name of a capture goes through one bounded call
(capture.bounded.run_bounded, as every external tool).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace

from lifeguard.capture.bounded import run_bounded
from lifeguard.model.stacks import Frame, ProcessStacks

DEMANGLE_TIMEOUT = 10.0
_MANGLED = re.compile(r"^(_R[A-Za-z0-9_]+|_ZN[A-Za-z0-9_$.]+E(\.[\w.]+)?)$")
# Rust's crate disambiguators and legacy hashes: noise to a reader, and they differ per build.
_RUST_NOISE = re.compile(r"\[[0-9a-f]{8,16}\]|::h[0-9a-f]{16}$")


def _clean(name: str) -> str:
    return _RUST_NOISE.sub("", name)


def demangle_names(names: set[str]) -> dict[str, str]:
    """Mangled name -> readable name, for the names c++filt could read (none without c++filt)."""
    mangled = sorted(n for n in names if _MANGLED.match(n))
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    # c++filt demangles the names given as arguments, one a line, in order.
    run = run_bounded([tool, *mangled], DEMANGLE_TIMEOUT)
    lines = run.stdout.splitlines()
    if run.returncode != 0 or len(lines) != len(mangled):
        return {}
    return {m: _clean(d) for m, d in zip(mangled, lines, strict=True) if d and d != m}


def demangled(processes: list[ProcessStacks]) -> list[ProcessStacks]:
    """The same stacks with mangled function names made readable."""
    names = {f.function for p in processes for t in p.threads for f in t.frames if f.function and not f.is_python}
    table = demangle_names(names)
    if not table:
        return processes

    def fix(frame: Frame) -> Frame:
        return replace(frame, function=table[frame.function]) if frame.function in table else frame

    return [replace(p, threads=tuple(replace(t, frames=tuple(fix(f) for f in t.frames)) for t in p.threads))
            for p in processes]
