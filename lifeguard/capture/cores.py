"""Core files: where the kernel puts them, and finding the ones a run left behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lifeguard.child.cores import core_pattern_is_local
from lifeguard.child.protocol import CORE_PATTERN_FILE

CORE_PATTERN = Path(CORE_PATTERN_FILE)


@dataclass(frozen=True)
class CoreSetup:
    pattern: str
    usable: bool  # cores land as files in the crashing process's working directory
    note: str  # what to do when they don't


def core_setup() -> CoreSetup:
    """Read the kernel's core_pattern and say whether lifeguard can pick cores up."""
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError:
        return CoreSetup("", False, "cannot read /proc/sys/kernel/core_pattern; native crash stacks need cores")
    if pattern.startswith("|"):
        handler = pattern[1:].split()[0] if pattern[1:].split() else "a handler"
        return CoreSetup(pattern, False,
                         f"core files are piped to {handler} (core_pattern {pattern!r}); lifeguard cannot read "
                         "them. Use --backtrace replay, or set core_pattern to 'core' (sysctl "
                         "kernel.core_pattern=core) on a machine you own.")
    if not core_pattern_is_local(pattern):
        return CoreSetup(pattern, False,
                         f"core files go to {pattern!r}, outside the run's folder; use --backtrace replay or set "
                         "kernel.core_pattern=core")
    return CoreSetup(pattern, True, "")
