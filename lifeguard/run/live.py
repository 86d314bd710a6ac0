"""A plain target's output, shown while it runs: the relays (lifeguard.run.relay) hand every chunk the
child writes to a ``LiveOutput`` (the terminal, lifeguard.report.live) as it arrives."""

from __future__ import annotations

from typing import Protocol

from lifeguard.model.run import RunSpec


class LiveOutput(Protocol):
    """Where a plain target's output goes while it runs (``stream`` is "stdout" or "stderr")."""

    def write(self, spec: RunSpec, stream: str, data: bytes) -> None: ...

    def close(self, spec: RunSpec) -> None:
        """The run is over: flush what is pending (a last line without its newline)."""
        ...
