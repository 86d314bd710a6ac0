"""Attach the Python processes of a plain run that lifeguard did not start itself.

A ``--`` command (a shell script that starts Python, a console script such as ``pytest``) and a plain
target's own Python subprocesses start without the bootstrap. lifeguard puts a folder holding only a
``sitecustomize.py`` first on their ``PYTHONPATH``; that file calls ``main`` here, which gives the process
the run's evidence machinery (bootstrap.attach: faulthandler dumps on the dump signal, fork records, phases,
cores at exit), then steps aside: the folder leaves ``sys.path``, lifeguard's modules leave ``sys.modules``,
and the next ``sitecustomize`` on the path (a distribution's own) runs as it would have.

Interpreters started with ``-I``, ``-E`` or ``-S`` ignore the hook; ``PYTHONFAULTHANDLER`` (set for the whole
tree) still gives them faulthandler's crash tracebacks unless they ignore the environment too.
"""

from __future__ import annotations

import os
import sys

from lifeguard.child import bootstrap, joined, protocol


def main(hook_dir: str) -> None:
    """Called by the generated sitecustomize, at interpreter start-up, before the program's first line."""
    while hook_dir in sys.path:
        sys.path.remove(hook_dir)
    joined.wait_for_cgroup()  # a command's Python: in the run's cgroup before the program's first line
    text = os.environ.get(protocol.ATTACH_ENV)
    # A process the bootstrap is about to run (its spec is still in the environment) is set up by it.
    if text and protocol.SPEC_ENV not in os.environ:
        spec: protocol.AttachSpec = eval(text, {"__builtins__": {}}, {})
        # An inherited descriptor number may name any file in a process started through exec (subprocess
        # closes what it does not pass): the events file is opened again by path.
        os.environ.pop(protocol.EVENTS_FD_ENV, None)
        bootstrap.attach(spec)
        bootstrap.hide_harness()
    _next_sitecustomize()


def _next_sitecustomize() -> None:
    """Import the sitecustomize this one shadows, if there is one, in its place."""
    ours = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")  # the next one on sys.path (ours is no longer on it): not a dependency
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours  # the import system expects to find the module it ran
