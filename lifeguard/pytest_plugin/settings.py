"""The plugin's settings: command line over ini file (a marker wins over both), each value checked once and named
by its source."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from lifeguard.model.run import Choice
from lifeguard.model.validate import positive_count, positive_seconds, shard

# One help text per setting, shared by the command-line option and its ini twin.
GUARD_HELP = ("run every collected test in a supervised child forked from this process: a crash, a hang or a "
              "failure at the child's exit (atexit, finalization, C++ static destructors) fails the test that "
              "left it, with lifeguard's evidence; @pytest.mark.lifeguard(False) opts a test out")

MODE_HELP = ("how --lifeguard runs the tests: 'group' (the default: many tests in one forked child, as plain "
             "pytest runs them; when the child's life fails, the tests are run again apart down to the one that "
             "fails it), or each test's body in a child of its own, after its fixtures are set up here: 'fork' "
             "(forked from this process), 'fresh' (a new interpreter: arguments must be plain data), or 'auto' "
             "(fork, unless this process runs threads of its own at the test, which a fork would not copy, "
             "and the test's arguments can be sent to a new interpreter); marked tests always run fresh")

TIMEOUT_HELP = ("deadline in seconds of the body of every supervised run (a lifeguard test, a --lifeguard test, "
                "a fixture call; in groups, each test from its setup to its teardown, and a group's exit); a "
                "marker's timeout= wins over it, and it over the ini file")

REPEAT_HELP = ("runs of every lifeguard test's body (and fixture call); a marker's repeat= wins over it, and "
               "it over the ini file")

REPORT_HELP = ("write one lifeguard report of the whole session into DIR: results.jsonl, report.json, "
               "junit.xml, report.html, index.txt, and the evidence of every failed run in "
               "DIR/runs/<test path>/")

SHARD_HELP = ("run shard K of N of every guarded or marked test's runs (each test's --lifeguard-repeat runs spread "
              "over the shards; a test with none here is skipped); `lifeguard merge` combines the shards' "
              "--lifeguard-report folders")

PROBE_HELP = ("under --lifeguard (group mode): after each test that passed, one more use of what the test made "
              "(its local variables as it returned), in its own process: 'fork-finalize' (fork; the child drops "
              "them and finalizes), 'fork-rerun' (fork; the child runs the test again), 'gc-thread' (they die in "
              "reference cycles collected on another thread), 'gc-cycle' (collected on the main thread); a "
              "crash or a hang there fails the test with the evidence (lifeguard survey --tests runs each)")


class GuardMode(Choice):
    """``--lifeguard-mode``: how an unmarked test runs under --lifeguard."""

    GROUP = "group"  # many tests in one forked child, split down to the one test when the child's life fails
    AUTO = "auto"  # forked from pytest's process; in a fresh interpreter while other threads run there
    FORK = "fork"  # always forked
    FRESH = "fresh"  # always in a fresh interpreter


MODES = tuple(mode.value for mode in GuardMode)


KEEPER_HELP = ("under --lifeguard with a child per test (--lifeguard-mode fork, fresh or auto), run the tests in a "
               "worker process that a new one replaces if pytest's own process crashes in a test (a fixture's "
               "teardown): that test errors and the session goes on (default true; false runs them in pytest's "
               "process, whose crash ends the session)")
MARKER_HELP = (
    "lifeguard(timeout=30, repeat=1, expect='passed', fixture=None, variant=None): run the test's body in "
    "fresh supervised interpreters, each for a whole process lifetime; the test passes when every run ends "
    "as expected: an outcome (passed, failed, crashed, hung, corrupted) with an optional phase (import, run, "
    "exit, fork-child), e.g. 'crashed@exit', or a dict per variant. fixture= builds fixtures_native/<name>/ "
    "found from the test file (variant= 'buggy', 'fixed' or both); the body imports it by name. "
    "lifeguard(False): this test is not guarded by --lifeguard."
)


@dataclass(frozen=True)
class Settings:
    """The session's lifeguard settings (command line over ini file); None where unset."""

    timeout: float | None = None
    repeat: int | None = None
    report_dir: Path | None = None
    guard_all: bool = False  # --lifeguard: every test, not only marked ones
    mode: GuardMode = GuardMode.GROUP
    shard: tuple[int, int] | None = None  # --lifeguard-shard K/N
    # --pdb or --trace with --lifeguard: unmarked tests stay in pytest's process, where the debugger can stop in
    # them (a forked child's frames are not pytest's to debug); the option's name, for the header.
    debugger: str = ""
    keeper: bool = True  # lifeguard.pytest_plugin.keeper (ini lifeguard_keeper)
    probe: str | None = None  # --lifeguard-probe: a test-suite probe (lifeguard.pytest_plugin.suite_probes)

    @property
    def in_groups(self) -> bool:
        """Unmarked tests run in groups (lifeguard.pytest_plugin.groups): --lifeguard in group mode, each test
        once (--lifeguard-repeat and --lifeguard-shard spread a test's runs: each test then has its own child)."""
        return self.guard_all and self.mode is GuardMode.GROUP and (self.repeat or 1) == 1 and self.shard is None


SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()


def _raw_setting(config: pytest.Config, name: str) -> tuple[str | None, str, Path]:
    """(value, where it came from, the folder a relative path is relative to)."""
    value = config.getoption(f"lifeguard_{name}")
    if value is not None:
        return value, f"--lifeguard-{name} from command line", config.invocation_params.dir
    value = config.getini(f"lifeguard_{name}")
    if value:
        overrides = getattr(config.option, "override_ini", None) or []
        if any(o.split("=", 1)[0].strip() == f"lifeguard_{name}" for o in overrides):
            return str(value), f"lifeguard_{name} from -o", config.invocation_params.dir
        base = config.inipath.parent if config.inipath else config.rootpath
        return str(value), f"lifeguard_{name} from ini file", base
    return None, "", config.invocation_params.dir


def read_settings(config: pytest.Config) -> Settings:
    """The settings, checked; a bad value is a usage error naming its source."""
    try:
        timeout, source, _ = _raw_setting(config, "timeout")
        seconds = positive_seconds(timeout, source) if timeout is not None else None
        repeat, source, _ = _raw_setting(config, "repeat")
        runs = positive_count(repeat, source) if repeat is not None else None
        report, source, base = _raw_setting(config, "report")
        folder = None
        if report is not None:
            if not report.strip():
                raise ValueError(f"{source}: an empty path")
            folder = (base / report).resolve()
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"{source}: {report!r} exists and is not a folder")
        guard_all = bool(config.getoption("lifeguard_all") or config.getini("lifeguard"))
        debugger = next((name for name, dest in (("--pdb", "usepdb"), ("--trace", "trace"))
                         if config.getoption(dest, False)), "") if guard_all else ""
        mode, source, _ = _raw_setting(config, "mode")
        if mode is not None and mode not in MODES:
            raise ValueError(f"{source}: {mode!r} is not one of {', '.join(MODES)}")
        shard_text, source, _ = _raw_setting(config, "shard")
        part = shard(shard_text, source) if shard_text is not None else None
    except ValueError as exc:
        raise pytest.UsageError(f"lifeguard: {exc}") from None
    settings = Settings(timeout=seconds, repeat=runs, report_dir=folder, guard_all=guard_all and not debugger,
                        mode=GuardMode(mode or GuardMode.GROUP), shard=part, debugger=debugger,
                        keeper=bool(config.getini("lifeguard_keeper")),
                        probe=config.getoption("lifeguard_probe", None))
    if settings.probe is not None and not settings.in_groups:  # a probe is applied in groups only
        raise pytest.UsageError(f"lifeguard: --lifeguard-probe {settings.probe} needs --lifeguard in group mode (the "
                                "default), without --lifeguard-repeat or --lifeguard-shard")
    return settings


def shard_of_test(nodeid: str, part: tuple[int, int] | None) -> tuple[int, int] | None:
    """The shard, as the engine sees it, for one test's runs: rotated by the test's id, so tests whose single
    run would all fall in shard 1 spread over the shards (the same in every shard's session)."""
    if part is None:
        return None
    import zlib

    number, count = part
    return ((number - 1 + zlib.crc32(nodeid.encode())) % count) + 1, count


def runs_in_shard(nodeid: str, repeat: int, part: tuple[int, int] | None) -> list[int]:
    """The run indices of a test's ``repeat`` runs that are this shard's."""
    rotated = shard_of_test(nodeid, part)
    if rotated is None:
        return list(range(repeat))
    number, count = rotated
    return list(range((number - 1) % count, repeat, count))
