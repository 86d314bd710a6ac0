"""Evidence capture: backtraces of live processes and core files."""

from lifeguard.capture.faulthandler import merge_faulthandler, parse_faulthandler
from lifeguard.capture.gdb import analyse_core, capture_live, gdb_available, replay_crash
from lifeguard.capture.python_gdb import find_python_gdb

__all__ = [
    "analyse_core",
    "capture_live",
    "find_python_gdb",
    "gdb_available",
    "replay_crash",
    "merge_faulthandler",
    "parse_faulthandler",
]
