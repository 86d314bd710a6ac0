"""lifeguard's own stdout and stderr: when their reader goes away, lifeguard stops printing, not working.

``lifeguard run ... | head -1`` closes the pipe after one line. Python ignores SIGPIPE, so the next write
raises BrokenPipeError (EPIPE); raised from a sink it would end the session before the report folder is
written, and the exit code would lie. A ``SafeOutput`` takes the text, and from the first EPIPE on drops it:
the session runs to its end, every report is written and the exit code is the verdict's.
"""

from __future__ import annotations

import io
import os
from typing import TextIO


class SafeOutput:
    """A text stream's writes, flushed at once. A write that fails (EPIPE: the reader went away; a closed
    stream; a redirection to a full disk) silences it for good; text the stream's encoding cannot hold is
    written with backslash escapes."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream if stream is not None else io.StringIO()
        self.gone = stream is None  # started with the descriptor closed (`>&-`): Python's sys.stdout is None

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (OSError, ValueError):
            return False

    def write(self, text: str) -> None:
        if self.gone:
            return
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:  # a terminal that is not UTF-8: show what it cannot encode
                encoding = getattr(self.stream, "encoding", None) or "ascii"
                self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            self.stream.flush()
        except OSError:  # EPIPE; or a redirection to a full disk: either way nobody gets to read it
            self.silence()
        except ValueError:  # closed under us
            self.gone = True

    def silence(self) -> None:
        """Stop writing; and point the stream's descriptor at /dev/null, so that the interpreter's own
        flush of the text still buffered, at exit, cannot fail (it would print a traceback and exit 120)."""
        self.gone = True
        try:
            descriptor = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            return
        try:
            os.dup2(devnull, descriptor)
        except OSError:
            pass
        finally:
            os.close(devnull)
