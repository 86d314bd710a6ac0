"""The description of one run: what the supervisor needs to start and judge it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from lifeguard.interpreter import Interpreter


class Choice(str, enum.Enum):
    """A named value that prints as its name and compares equal to it (``"fresh" == StartMode.FRESH``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class StartMode(Choice):
    """How a run's main process started."""

    FRESH = "fresh"  # a new interpreter
    FORK_FAST = "fork-server/fast"  # forked from the warm server; os._exit after flushing
    FORK_FULL = "fork-server/full"  # forked from the warm server; full finalization
    PYTEST_FORK = "pytest-fork"  # forked from the pytest process after the test's fixtures; a process's exit


class BacktraceMethod(Choice):
    """How a crash's native stacks are read."""

    CORE = "core"  # the kernel's core file (falling back to a replay when cores are piped elsewhere)
    REPLAY = "replay"  # rerun the run under gdb and capture it where it stops


class RunKind(Choice):
    """What a run's body is."""

    FUNCTION = "function"  # a function in a scenario file
    SCRIPT = "script"  # a plain script
    CODE = "code"  # -c CODE
    MODULE = "module"  # -m MODULE
    COMMAND = "command"  # -- COMMAND: any executable, its Python descendants attached through the environment


PLAIN_KINDS = (RunKind.SCRIPT, RunKind.CODE, RunKind.MODULE, RunKind.COMMAND)  # a whole program, not a function


@dataclass(frozen=True)
class RunSpec:
    """Everything the supervisor needs to start one run."""

    scenario: str
    variant: str
    index: int
    kind: RunKind
    path: str
    function: str
    code: str | None
    interpreter: Interpreter
    timeout: float
    run_dir: Path
    expected: str
    fixture: str | None = None
    fixture_dir: str | None = None
    argv: tuple[str, ...] = ()  # plain targets: the program's sys.argv (a command: its argv)
    module: str = ""  # -m MODULE
    workdir: str = ""  # plain targets: the user's folder ("": the run's own folder)
    env: dict[str, str] = field(default_factory=dict)
    python_flags: tuple[str, ...] = ()
    # Native evidence for this run: a crashing child dumps core and gdb reads it,
    # gdb captures a hang (off after a series' first few failures, or with --no-native).
    cores: bool = True
    keep_cores: bool = False
    backtrace: BacktraceMethod = BacktraceMethod.CORE
    seed: int = 0
    perturbations: tuple[str, ...] = ()
    mode: StartMode = StartMode.FRESH
    replay: str = ""  # the command that reruns this run (same seed and perturbations)
    deadline_from_body: bool = False  # the timeout counts from the body's start (Scenario.deadline_from_body)
    # Early hang detection (run.stillness): end the run as hung once every thread of its tree has been blocked,
    # using no CPU time, for this many seconds, before the deadline; None: wait for the deadline.
    hang_settle: float | None = None

    @property
    def cwd(self) -> Path:
        """Where the run's main process starts: the user's folder for plain targets, else the run's folder."""
        return Path(self.workdir) if self.workdir else self.run_dir

    @property
    def plain(self) -> bool:
        """A plain target (script, -c, -m, command): output shown live, the program's own exit code."""
        return self.kind in PLAIN_KINDS

    @property
    def parks_crashes(self) -> bool:
        """Its processes wait in lifeguard's fatal-signal handler until their stacks are read
        (lifeguard.child.crash_park): native evidence is wanted, and the body works in the user's folder, where
        cores are off (a plain target, a test forked from pytest)."""
        return (self.cores and self.backtrace is BacktraceMethod.CORE
                and (self.plain or self.mode is StartMode.PYTEST_FORK))


# The ways a run can start, as `--mode` names them.
MODES = ("auto", "fresh", "fork-server")
