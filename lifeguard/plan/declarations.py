"""Scenarios from what the discovery process recorded, or the first thing that went wrong.

The records (child.discovery) come in the order things happened there, and are read in that order, so
the error is the first that happened, as when lifeguard imported the files itself: a bad definition
(checked here, on data, by model.scenario.define: the messages the decorator always gave), what a file
raised, a fork at import, a file that declares nothing runnable; then how the process ended, if it ended
early (a crash, an exit, the deadline) while loading a file, and processes the files left running.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifeguard.child import protocol
from lifeguard.errors import (
    ConfigurationError,
    DiscoveryFailedError,
    LifeguardError,
    ScenarioDefinitionError,
    ScenarioFileError,
)
from lifeguard.model.scenario import Scenario, define
from lifeguard.model.validate import positive_seconds
from lifeguard.plan.discovery import DISCOVERY_TIMEOUT, RECORDS_CAP, Discovery, run_discovery


def load_scenario_files(paths: list[Path]) -> dict[Path, list[Scenario]]:
    """The scenarios each file declares (absolute paths, imported in this order), all from one discovery
    process."""
    if not paths:
        return {}
    files = [str(path) for path in paths]
    timeout = discovery_timeout()
    reading = _Reading(files, {})
    try:
        found = run_discovery(files, timeout, reading.feed)
    except OSError as exc:
        raise DiscoveryFailedError(f"cannot start the discovery process ({sys.executable}): {exc}") from None
    return {Path(path): scenarios for path, scenarios in reading.finish(found).items()}


def discovery_timeout() -> float:
    """LIFEGUARD_DISCOVERY_TIMEOUT, else DISCOVERY_TIMEOUT."""
    text = os.environ.get(protocol.DISCOVERY_TIMEOUT_ENV)
    if not text:
        return DISCOVERY_TIMEOUT
    try:
        return positive_seconds(text, f"{protocol.DISCOVERY_TIMEOUT_ENV} from environment")
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


@dataclass(frozen=True)
class Unplain:
    """A value the discovery process could only record as its repr: shown as the real object was."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass
class _Reading:
    """The records read so far, one at a time as they come: the first error ends the discovery at once."""

    files: list[str]
    scenarios: dict[str, list[Scenario]]
    loading: str | None = None  # a file whose import started and did not end
    last: str | None = None  # the last file whose import ended
    done: bool = False
    started: dict[str, list[int]] = field(default_factory=dict)  # file -> the process's children after it


    def feed(self, line: bytes) -> None:
        """One record line; raises the error it shows."""
        _read(_parse(line, self), self)

    def finish(self, found: Discovery) -> dict[str, list[Scenario]]:
        """Every file's scenarios, once the process has ended as ``found`` says; or the error its end is."""
        return _finish(self, found)


def _finish(reading: _Reading, found: Discovery) -> dict[str, list[Scenario]]:
    if found.overflow:
        raise ScenarioFileError(f"{reading.loading or reading.last}: the process loading it wrote more than "
                                f"{RECORDS_CAP // 2**20} MiB of declarations")
    if not reading.done or found.status != 0:
        raise _ended_early(found, reading)
    if found.leftovers:
        raise _left_running(found.leftovers, reading)
    return reading.scenarios


def _read(record: dict[str, Any], reading: _Reading) -> None:
    kind = record.get(protocol.EVENT_KEY)
    if kind == protocol.LOADING:
        reading.loading = _field(record, "path", str)
        reading.scenarios[reading.loading] = []
    elif kind == protocol.DECLARED:
        if reading.loading is not None:  # (not from a thread that declares after its file's import)
            reading.scenarios[reading.loading].append(_scenario(record))
    elif kind == protocol.FORKED_AT_IMPORT:
        line = _field(record, "line", int)
        where = f"{_field(record, 'path', str)}:{line}" if line else _field(record, "path", str)
        raise ScenarioFileError(f"{where}: forks at import (os.fork() while lifeguard read its declarations); "
                                "the forked copy was ended")
    elif kind == protocol.LOADED and reading.loading is not None:
        path, reading.loading = reading.loading, None
        reading.last = path
        reading.started[path] = list(record.get("children") or [])
        _check_loaded(record, path, reading.scenarios[path])
    elif kind == protocol.DISCOVERY_FAILED:
        raise DiscoveryFailedError(f"the discovery process failed: {_last_line(str(record.get('error')))}")
    elif kind == protocol.DISCOVERY_DONE:
        reading.done = True
    else:
        raise DiscoveryFailedError(f"the discovery process sent a record out of place: {str(record)[:200]}")


def _parse(line: bytes, reading: _Reading) -> dict[str, Any]:
    try:
        record = ast.literal_eval(line.decode())
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict):
        where = reading.loading or reading.last or "the scenario files"
        raise DiscoveryFailedError(f"the discovery process sent a malformed record while loading {where}: "
                                   f"{line[:200]!r}")
    return {key: _decoded(value) for key, value in record.items()}


def _decoded(value: Any) -> Any:
    """A recorded value with the discovery's tagged values (child.discovery.plain) made real again."""
    if isinstance(value, tuple) and len(value) == 3 and value[0] == protocol.PLAIN_TAG:
        return float(value[2]) if value[1] == "float" else Unplain(str(value[2]))
    if isinstance(value, dict):
        return {_decoded(key): _decoded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_decoded(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _field(record: dict[str, Any], key: str, kind: type) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DiscoveryFailedError(f"the discovery process sent a record without a {kind.__name__} {key!r}: "
                                   f"{str(record)[:200]}")
    return value


def _scenario(record: dict[str, Any]) -> Scenario:
    path, line = _field(record, "path", str), _field(record, "line", int)
    function = record.get("function")
    options = record.get("options")
    if not isinstance(function, str) or not isinstance(options, dict):
        raise ScenarioFileError(f"{path}:{line}: @lifeguard.scenario decorates something that has no name as a "
                                "function (a run takes its body from the file by name)")
    doc, body = record.get("doc"), record.get("body")
    try:
        return define(record.get("fixture"), options, function=function, path=path, line=line,
                      doc=doc if isinstance(doc, str) else None, body=body if isinstance(body, str) else None)
    except ScenarioDefinitionError as exc:
        raise ConfigurationError(str(exc)) from None


def _check_loaded(record: dict[str, Any], path: str, declared: list[Scenario]) -> None:
    error = record.get("error")
    if isinstance(error, dict):
        line = error.get("line") or 0
        if "syntax" in error:
            raise ConfigurationError(f"{path}:{line}: syntax error: {error['syntax']}")
        if error.get("type") == "SystemExit":
            code = error.get("exit")
            raise ScenarioFileError(f"{path}:{line}: exits at import (sys.exit({'' if code is None else repr(code)}) "
                                    "while lifeguard read its declarations)")
        raise ConfigurationError(f"{path}:{line}: error while loading: {error.get('type')}: {error.get('message')}")
    unreachable = set(record.get("unreachable") or ())
    for item in declared:
        if item.function in unreachable:
            raise ScenarioFileError(f"{item.where}: scenario {item.name!r} cannot run: {item.function!r} is not a "
                                    f"top-level name of {Path(path).name} (a run imports the file and takes its "
                                    "body by name)")
    names = [item.name for item in declared]
    dupes = sorted({name for name in names if names.count(name) > 1})
    if dupes:
        raise ConfigurationError(f"{path}: scenario name declared twice: {', '.join(dupes)}")
    if not declared:
        raise ScenarioFileError(f"{path}: declares no scenario when imported: no @lifeguard.scenario(...) ran "
                                "(written with its parentheses, on a function at the file's top level?); a "
                                f"program that only imports lifeguard runs as: lifeguard run -- python {path}")


def _ended_early(found: Discovery, reading: _Reading) -> LifeguardError:
    """The error for a discovery process that did not get to the end of its files, or did not exit cleanly."""
    path = reading.loading or reading.last
    if path is None:
        return DiscoveryFailedError(f"the discovery process {_how_it_ended(found)} before loading any file: "
                                    f"{_last_line(found.output) or 'no output'}")
    line = line_in_dump(found.output, path)
    where = f"{path}:{line}" if line else path
    if found.timed_out:
        return ScenarioFileError(f"{where}: still loading after {found.timeout:g} s, the discovery deadline: a top "
                                 f"level that blocks or loops ({protocol.DISCOVERY_TIMEOUT_ENV}=SECONDS gives a slow "
                                 "import more time)")
    during = "at import" if reading.loading else "after its import (from a thread it started?)"
    verb = "crashes" if found.status is not None and found.status < 0 else "exits"
    return ScenarioFileError(f"{where}: {verb} {during}: the process loading it {_how_it_ended(found)}")


def _how_it_ended(found: Discovery) -> str:
    if found.status is None:
        return "could not be ended"
    if found.status < 0:
        try:
            name = signal.Signals(-found.status).name
        except ValueError:
            name = f"signal {-found.status}"
        return f"was killed by {name}"
    return f"exited with code {found.status}" + (" (os._exit()?)" if found.status == 0 else "")


def _left_running(pids: tuple[int, ...], reading: _Reading) -> ScenarioFileError:
    culprit = next((path for path, children in reading.started.items() if set(children) & set(pids)), None)
    if culprit is None:
        culprit = reading.files[0] if len(reading.files) == 1 else f"one of the {len(reading.files)} scenario files"
    shown = ", ".join(map(str, pids[:5])) + (" ..." if len(pids) > 5 else "")
    return ScenarioFileError(f"{culprit}: left {len(pids)} process(es) running after its import (pid {shown}), "
                             "now killed: a scenario file's top level must not start processes")


_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+", re.M)
_FRAME = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<function>.*)$')


def line_in_dump(output: str, path: str) -> int:
    """The line ``path`` was at in faulthandler's dump of a crash or of the deadline's SIGABRT: its innermost
    frame on the thread that runs its import (0: not found)."""
    for section in reversed(_THREAD_HEADER.split(output)[1:]):
        frames = [m for m in map(_FRAME.match, section.splitlines()) if m and m["file"] == path]
        if any(m["function"].strip() == "<module>" for m in frames):
            return int(frames[0]["line"])
    return 0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
