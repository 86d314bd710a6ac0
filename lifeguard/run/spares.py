"""Passed runs' folders, recycled off the runs' own time.

A passed run's folder is no longer needed, but removing it (and making the next run's) right after the
verdict is on the path from one run to the next. Instead it is discarded here, and while a later run's child
starts (supervise's ``meanwhile``, where it costs the session nothing) it is emptied into a spare
(empty_run_folder), or removed; a later run's folder is then a rename away (RunFiles.create's ``reuse``).
Used by the engine (one per worker) and the pytest plugin's session.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lifeguard.run.launch import empty_run_folder

SPARES = 2  # emptied folders of passed runs kept ready for the next runs


class RunFolders:
    """The discarded and spare folders of one sequence of runs (one thread's: not locked)."""

    def __init__(self) -> None:
        self._discarded: list[Path] = []  # passed runs' folders, as their runs left them
        self._spares: list[Path] = []  # discarded folders emptied while a later run's child ran: ready for a run

    def discard(self, run_dir: Path) -> None:
        """A passed run's folder, no longer needed: emptied or removed by a later ``tidy``, what is left by
        ``remove_all``."""
        self._discarded.append(run_dir)

    def spare(self, run_dir: Path) -> Path | None:
        """A folder emptied while an earlier run's child ran, that can become ``run_dir`` (a rename away from
        ready); never ``run_dir`` itself (a run again in this session, by a plugin that reruns failures, uses the
        same one, which is no spare from now on). Handed out once. Never a discarded folder as its run left it:
        emptying that would be on the run's own time (truncating the previous run's result channel took 0.24
        ms, more than making a new folder), and the previous run's folder is always one of those."""
        self._spares = [folder for folder in self._spares if folder != run_dir]
        return self._spares.pop(0) if self._spares else None

    def tidy(self, run_dir: Path) -> None:
        """While the child of the run in ``run_dir`` starts: the discarded folders emptied into spares (SPARES
        at most) or removed."""
        folders, self._discarded = self._discarded, []
        for folder in folders:
            if folder == run_dir:
                continue  # the run starting now uses it
            if len(self._spares) < SPARES and empty_run_folder(folder):
                self._spares.append(folder)
            else:
                shutil.rmtree(folder, ignore_errors=True)

    def remove_all(self, keep: Path | None = None) -> None:
        """Remove the discarded and spare folders but ``keep`` (the folder of the run starting now)."""
        folders = self._discarded + self._spares
        self._discarded, self._spares = [], []
        for folder in folders:
            if folder != keep:
                shutil.rmtree(folder, ignore_errors=True)
