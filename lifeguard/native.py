"""Native capture hooks for hung runs (gdb), plugged into the supervisor's ladder."""

from __future__ import annotations

from lifeguard.supervise import CaptureHook


def native_capture_hooks() -> tuple[CaptureHook, ...]:
    """The hooks available on this machine; empty when gdb is missing."""
    return ()
