"""A plain target's output on the terminal while it runs: whole lines, made visible, each stream to its own.

The child's stdout goes to lifeguard's stdout and its stderr to lifeguard's stderr (a CI log shows
pytest's output where it would be without lifeguard). Bytes become text as UTF-8 (undecodable bytes as
``\\xNN``) and control characters are shown, never acted on (report.escape.for_terminal): a child cannot
move the cursor, recolour the terminal or hide lines. A terminal that goes away (``| head``, a closed
window) silences the echo (report.stream.SafeOutput), never the run's supervision. With several plain runs
in a session each line starts with its run's name, so parallel runs stay apart.
"""

from __future__ import annotations

import codecs
import sys
import threading
from typing import TextIO

from lifeguard.model.run import RunSpec
from lifeguard.report.escape import for_terminal
from lifeguard.report.stream import SafeOutput

# A line longer than this is shown in pieces rather than held back (a progress dots line, a binary blob).
MAX_PENDING = 64 * 1024


class TerminalEcho:
    """LiveOutput (lifeguard.run.live) for the terminal."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None, *, prefix: bool = False) -> None:
        self.streams = {"stdout": SafeOutput(stdout or sys.stdout), "stderr": SafeOutput(stderr or sys.stderr)}
        self.prefix = prefix
        self.lock = threading.Lock()
        self.decoders: dict[tuple[str, int, str], codecs.IncrementalDecoder] = {}
        self.pending: dict[tuple[str, int, str], str] = {}

    def _key(self, spec: RunSpec, stream: str) -> tuple[str, int, str]:
        return (f"{spec.scenario}[{spec.variant}]", spec.index, stream)

    def write(self, spec: RunSpec, stream: str, data: bytes) -> None:
        key = self._key(spec, stream)
        with self.lock:
            decoder = self.decoders.setdefault(key, codecs.getincrementaldecoder("utf-8")("backslashreplace"))
            text = self.pending.pop(key, "") + decoder.decode(data)
            complete, newline, rest = text.rpartition("\n")
            if len(rest) > MAX_PENDING:
                complete, newline, rest = text, "\n", ""
            if rest:
                self.pending[key] = rest
            if newline:
                self._show(spec, stream, complete.removesuffix("\r"))

    def close(self, spec: RunSpec) -> None:
        with self.lock:
            for stream in self.streams:
                key = self._key(spec, stream)
                decoder = self.decoders.pop(key, None)
                text = self.pending.pop(key, "") + (decoder.decode(b"", final=True) if decoder else "")
                if text:
                    self._show(spec, stream, text)

    def _show(self, spec: RunSpec, stream: str, text: str) -> None:
        lines = for_terminal(text).split("\n")
        if self.prefix:
            lines = [f"[{spec.scenario}#{spec.index}] {line}" for line in lines]
        self.streams[stream].write("\n".join(lines) + "\n")
