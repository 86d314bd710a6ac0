"""A plain target's output, shown while it runs: the run's output files followed as the child writes them.

The child writes to files, never to a pipe (a pipe would block a child whose reader is slow, and a hung
child's output must stay readable after it is killed). A ``Tail`` reads what was added to stdout.txt and
stderr.txt since its last look and hands it to a ``LiveOutput`` (the terminal, lifeguard.report.live).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from lifeguard.model.run import RunSpec

# How often a live run's output is looked at: often enough to read as live, cheap (two stat calls).
LIVE_POLL_INTERVAL = 0.05
READ_CHUNK = 1 << 20


class LiveOutput(Protocol):
    """Where a plain target's output goes while it runs (``stream`` is "stdout" or "stderr")."""

    def write(self, spec: RunSpec, stream: str, data: bytes) -> None: ...

    def close(self, spec: RunSpec) -> None:
        """The run is over: flush what is pending (a last line without its newline)."""
        ...


class Tail:
    """Follows a run's two output files from where it last read them."""

    def __init__(self, spec: RunSpec, sink: LiveOutput, stdout: Path, stderr: Path) -> None:
        self.spec = spec
        self.sink = sink
        self.paths = {"stdout": stdout, "stderr": stderr}
        self.offsets = {"stdout": 0, "stderr": 0}

    def pump(self) -> None:
        """Hand on everything written since the last look."""
        for stream, path in self.paths.items():
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[stream])
                    while chunk := f.read(READ_CHUNK):
                        self.offsets[stream] += len(chunk)
                        self.sink.write(self.spec, stream, chunk)
            except OSError:
                continue

    def capped(self, path: Path) -> None:
        """The file was cut down to its newest part (supervise._cap_output) just after a pump: what is
        left has been shown, so reading goes on from its new end."""
        for stream, known in self.paths.items():
            if known == path:
                try:
                    self.offsets[stream] = path.stat().st_size
                except OSError:
                    pass

    def close(self) -> None:
        self.pump()
        self.sink.close(self.spec)
