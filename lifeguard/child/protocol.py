"""Every name that crosses the line between the supervisor and the child, declared once.

Both sides import this module: the supervisor (lifeguard.run, capture, diagnose) to start a child and
read what it wrote, the child (bootstrap, the public API, the fork-server) to write it. Standard library
only, and cheap to import: every run's start-up pays for it (no `signal`, whose import pulls in `enum`:
the dump signal reaches the child as a number in the spec).
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# --- environment variables the supervisor sets for a child -----------------------------------------
CHILD_ENV = "LIFEGUARD_CHILD"  # "1" inside a supervised child: @lifeguard.scenario does no bookkeeping there
SPEC_ENV = "LIFEGUARD_SPEC"  # the run spec (ChildSpec) as a Python literal, or "@" and the file holding it:
# the kernel takes no environment string over 128 KiB (a plain target's 20,000 arguments are in the spec).
SPEC_INLINE_LIMIT = 32 * 1024
EVENTS_FD_ENV = "LIFEGUARD_EVENTS_FD"  # the result channel: an inherited O_APPEND descriptor...
# ...or a path, for a child started by a tool that passes no descriptors through (a replay under gdb).
EVENTS_PATH_ENV = "LIFEGUARD_EVENTS_PATH"
VARIANT_ENV = "LIFEGUARD_VARIANT"  # "buggy", "fixed" or "default"
# Marks every process of a run's tree (inherited through fork and exec), so orphans can be told apart.
RUN_ID_ENV = "LIFEGUARD_RUN_ID"
SEED_ENV = "LIFEGUARD_SEED"  # the run's seed, for perturbations in the child and in native fixtures
JITTER_ENV = "LIFEGUARD_JITTER_US"  # the jitter perturbation's bound, read by hook_point() and native fixtures
# Plain targets and commands: what a Python process of the run's tree that lifeguard did not start itself (a
# command's Python, a program's Python subprocesses) needs to attach to the run (ATTACH_KEYS, a Python literal).
# It reaches them through SITE_HOOK_FILE, on the PYTHONPATH lifeguard gives the run.
ATTACH_ENV = "LIFEGUARD_ATTACH"

# The cgroup the run's processes must be in before any of the run's own code runs ("CONTROLLERS:PATH" as
# /proc/self/cgroup names it, "" for the unified hierarchy): the bootstrap and the attach hook wait for it.
CGROUP_ENV = "LIFEGUARD_CGROUP"

# The supervisor's pid, where it started the process with no step between fork and exec (no death signal asked
# for before exec: that step makes every spawn fork the supervisor whole). Until the process is in its cgroup,
# where the watchdog guards it, it ends itself if the supervisor is gone (child.joined.wait_for_cgroup).
SUPERVISOR_ENV = "LIFEGUARD_SUPERVISOR"

# --- environment variables the supervisor reads ------------------------------------------------------
# How runs' processes are tracked: "auto" (a cgroup where one is writable, else the subreaper), "cgroup" or
# "subreaper" (forced: the fallback's own tests, or a machine whose cgroups misbehave).
MEMBERSHIP_ENV = "LIFEGUARD_MEMBERSHIP"
# "0": `lifeguard run ... -- COMMAND` starts the command only once lifeguard is loaded, never ahead of it
# (lifeguard.run.headstart).
HEADSTART_ENV = "LIFEGUARD_HEADSTART"

# Read by a Dask worker's half of a cluster run (run.cluster_worker): "1" makes the worker keep each run's files in
# a folder of its own and ship them back, as a worker on another machine does (the tests' one-machine cluster).
CLUSTER_PRIVATE_ENV = "LIFEGUARD_CLUSTER_PRIVATE_DIRS"

# --- the discovery process (child.discovery): scenario files are imported there, never in the supervisor ----
# Set only for the discovery process: @lifeguard.scenario records its arguments there as data (child.discovery)
# and the supervisor checks them. Its value is the discovery's own id, which also marks every process of its
# tree (inherited through fork and exec), so a process a scenario file leaves behind is found and killed.
DISCOVER_ENV = "LIFEGUARD_DISCOVER"
# The supervisor's deadline for loading every scenario file of a session (seconds; plan.discovery).
DISCOVERY_TIMEOUT_ENV = "LIFEGUARD_DISCOVERY_TIMEOUT"
# The request, a Python literal dict on the discovery process's stdin: the files to import in order, the
# supervisor's sys.path, the descriptor the records go out on, the supervisor's pid (DiscoveryRequest).
DISCOVERY_REQUEST_KEYS = ("files", "sys_path", "records_fd", "supervisor")
# Records, one Python-literal dict a line (with EVENT_KEY), in the order things happened:
LOADING = "loading"  # importing "path" starts
# An @lifeguard.scenario ran: the function's name, path, line, doc and "body" (an async def or generator
# function, else None); "fixture", "options".
DECLARED = "declared"
# "path" imported: "error" (None, or what it raised), "unreachable" (bodies a run cannot find), "children" (the
# discovery process's children now: the supervisor names the file that left a process running).
LOADED = "loaded"
FORKED_AT_IMPORT = "forked-at-import"  # os.fork() at import ("path", "line"); the copy ended at once
DISCOVERY_DONE = "discovery-done"  # every file was loaded (or one failed): the process exits next
DISCOVERY_FAILED = "discovery-failed"  # the discovery process's own code failed ("error": its traceback)
# A value that is not a plain literal travels as (PLAIN_TAG, kind, text): kind "repr" (the object's repr) or
# "float" (a float that is not finite, which repr() cannot give as a literal).
PLAIN_TAG = "\x00lifeguard"

# --- the run spec: the dict in SPEC_ENV (or in a fork-server request), ChildSpec below -------------
if TYPE_CHECKING:
    from typing import TypedDict

    class ChildSpec(TypedDict):
        """What the child bootstrap needs of a run (lifeguard.run.launch.child_spec): plain data, sent as a
        Python literal or as JSON. A type only: mypy checks both sides, the child pays no import for it."""

        kind: str  # "function", "script", "code" or "module"
        path: str  # scenario file or script
        function: str  # the body's name in the scenario file
        code: str | None  # for kind "code"
        fixture: str | None  # the fixture module to import and pass to the body
        fixture_dir: str | None  # where its build is
        run_dir: str  # the run's own folder (its working directory)
        dump_signal: int  # the signal that asks for a faulthandler dump
        argv: list[str]  # a script's arguments
        cores: bool  # raise RLIMIT_CORE: a crash leaves a core for gdb
        seed: int  # the run's seed
        perturbations: list[str]  # names, applied in the child (plan.perturbations)
        variant: str  # as VARIANT_ENV
        exit: str  # forked runs: "fast" (os._exit after flushing) or "full" (finalization)
        module: str  # for kind "module": the module -m runs
        workdir: str  # plain targets: the user's folder, the program's working directory ("" for the run's)
        bytecode: str | None  # a script, a scenario file: its code compiled by the supervisor for the child (.pyc)

    class AttachSpec(TypedDict):
        """What a Python process of a plain run that lifeguard did not start needs to join it (ATTACH_ENV, a
        Python literal): ChildSpec's entries of these names (lifeguard.run.launch.attach_spec)."""

        run_dir: str
        dump_signal: int
        cores: bool
        seed: int
        perturbations: list[str]

    class DiscoveryRequest(TypedDict):
        """The discovery process's request (DISCOVERY_REQUEST_KEYS, a Python literal on its stdin)."""

        files: list[str]  # scenario files to import, in order
        sys_path: list[str]  # the supervisor's sys.path
        records_fd: int  # the descriptor the records go out on
        supervisor: int  # the supervisor's pid: the discovery dies with it

# --- the attach spec: keys of the dict in ATTACH_ENV (AttachSpec) ---------------------------------------
ATTACH_KEYS = ("run_dir", "dump_signal", "cores", "seed", "perturbations")

# --- events: one JSON object a line on the result channel ----------------------------------------
EVENT_KEY = "event"  # every record has EVENT_KEY, "pid" and "time"
STARTED = "started"  # the bootstrap is up (python version, main thread)
BODY_START = "body-start"
BODY_END = "body-end"
BODY_ERROR = "body-error"  # the body raised (the error's type and message)
# An atexit callback was registered ("callback": its module and qualified name), in order: atexit runs them last
# registered first, so a crash in one tells which ran before it.
ATEXIT_REGISTERED = "atexit-registered"
# The last atexit callback ran (extension modules loaded, other threads alive): Py_Finalize and exit() follow.
ATEXIT_DONE = "atexit-done"
# os._exit was called ("status", "stack": the caller's frames, innermost first, "file:line in function"):
# what ended a process that never finished its body or its exit.
OS_EXIT = "os-exit"
FORKED = "forked"  # a forked child of the run: parent pid, forking_thread, parent_threads at fork
# A garbage collection ran on a thread other than the main one ("thread": its kernel thread id, "thread_name").
GC_FOREIGN_THREAD = "gc-foreign-thread"
# Such a collection ended having freed objects ("collected": how many; their destructors ran on that thread).
GC_FOREIGN_FREED = "gc-foreign-freed"
MAX_FOREIGN_GC_EVENTS = 20  # of each of the two, per process
CORRUPTED = "corrupted"  # child.report_corruption()
NOTE = "note"  # child.note()
ATTACHED = "attached"  # a Python process the run started without the bootstrap joined it (its executable, argv)
# The process now works in the run's folder with core dumps on (its working directory at the time, for the
# notes): plain targets switch at the start of finalization, so an exit crash leaves its core there.
CORES_ON = "cores-on"
PYTEST_OUTCOME = "pytest-outcome"  # a pytest body called pytest.skip() / pytest.xfail()
# A probe's parent forked a child ("child": its pid), sent before the child can report anything itself: a child
# that hangs or dies inside fork() (an atfork handler) never emits FORKED, and is still the run's fork-child.
FORK_CHILD = "fork-child"
# How a forked child ended ("child", "status": exit code, negative: its signal): a probe's parent reports its
# child's, and every process at its exit reports, with "by": "kernel", each child it forked that ended non-zero
# (fork_ends: read from a pidfd, whoever reaped the child).
FORK_CHILD_EXIT = "fork-child-exit"
# What a probe run did with its module, once its hook returned (PROBE_KEYS; "why": the one line saying why it
# exercised nothing, "" when it did). A probe that exercised nothing then exits with a non-zero status and no
# traceback; the supervisor makes such a run "not exercised" (not_exercised). A fork probe's FORK_CHILD also
# says "after" (seconds since the hook returned), "threads" (native threads alive) and "hook_threads" ([name,
# state letter, CPU ns] of each thread the hook started).
PROBE_EXERCISED = "probe-exercised"
PROBE_KEYS = ("probe", "exercised", "calls", "raised", "callback_calls", "returned", "of_module", "threads_before",
              "threads_after", "hook_threads", "waited", "why")


def not_exercised(events: "Iterable[Any]", main_pid: int) -> str | None:
    """Why the main process's probe used nothing of its module (its PROBE_EXERCISED event), or None when it did
    or is no probe: what run.classify makes a ``not exercised`` run of."""
    for event in events:
        if event.name == PROBE_EXERCISED and event.pid == main_pid and event.get("exercised") is False:
            return str(event.get("why") or "the probe's hook used nothing of its module")
    return None

# --- frames: the child's functions a stack shows, which say what phase of its life a process was in -----
BODY_FRAMES = ("_run_body", "become_run")  # bootstrap's and forked_test's: the body runs inside them
EXIT_FRAMES = ("_exit_as_a_process", "_drop_core", "_at_exit")  # the exit runs inside them
CHILD_PACKAGE = "/lifeguard/child"  # the folder their files are in, as a frame's path has it

# --- files in the run's folder ----------------------------------------------------------------------
EVENTS_FILE = "events.txt"
STDOUT_FILE = "stdout.txt"
STDERR_FILE = "stderr.txt"
SPEC_FILE = "spec.txt"  # a spec too long for SPEC_ENV
BOOT_SCRIPT = "lifeguard_boot.py"  # the bootstrap as a script, for tools that run a file (gdb)
BOOTSTRAP = "from lifeguard.child import bootstrap"  # the child's first statement of its own (run.launch.child_argv)


def is_bootstrap(cmdline: list[str] | tuple[str, ...]) -> bool:
    """Whether a process's command line is lifeguard's child bootstrap, not a command anyone typed."""
    return any(BOOTSTRAP in word or word.endswith(f"/{BOOT_SCRIPT}") for word in cmdline)

SITE_HOOK_DIR = "attach"  # the folder put first on a plain run's PYTHONPATH...
SITE_HOOK_FILE = "sitecustomize.py"  # ...holding only this, which attaches each Python process (child.attach)
# The fatal signals a plain target's process parks in (lifeguard.child.crash_park) while its cores are off:
# SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV (the same numbers on x86-64 and aarch64 Linux).
PARKED_SIGNALS = (4, 6, 7, 8, 11)
# SIGTERM parks too in a process forked while its parent ran other threads (a pool's library may end such a
# child itself): on x86-64 only, where the supervisor reads who sent it from the signal frame (SA_SIGINFO).
PARKED_TERMINATION = 15
CORE_PATTERN_FILE = "/proc/sys/kernel/core_pattern"
LIMITS_FILE = "/proc/self/limits"
BUNDLE_DIR = "child-bundles"  # in lifeguard's cache: child.bundle's files, one an interpreter and package
# A test forked from pytest (--lifeguard) whose body failed: the failure as pytest itself reports it.
PYTEST_FAILURE_FILE = "pytest-failure.txt"
PYTEST_REPORT_FILE = "pytest-report.json"  # ...and pytest's own report of it, serialized as pytest-xdist does
# The reports a forked test's body logged itself (subtests), one serialized report a line, for pytest's process.
PYTEST_LOGGED_FILE = "pytest-logged.jsonl"


# The dump file of a passed run, left in its folder when the folder is made ready for another run (run.launch.
# empty_run_folder): the next run's process renames it to its own dump file instead of making a new one, which
# allocates no inode (on ext4 without a journal a new one waits for a scan past the recently deleted ones).
SPARE_DUMP_FILE = "dump-spare.txt"


_DUMP_PREFIX, _DUMP_SUFFIX = "faulthandler-", ".txt"


def faulthandler_file(pid: int) -> str:
    """The file a process of the run dumps its Python stacks into, in the run's folder."""
    return f"{_DUMP_PREFIX}{pid}{_DUMP_SUFFIX}"


def is_faulthandler_file(name: str) -> bool:
    """A name faulthandler_file gives."""
    pid = name.removeprefix(_DUMP_PREFIX).removesuffix(_DUMP_SUFFIX)
    return pid.isdigit() and name == faulthandler_file(int(pid))


# --- the fork-server's messages (supervisor <-> server, one JSON object each) -----------------------
SERVER_STARTED = "started"  # server -> supervisor: {"started": pid}, in request order
SERVER_EXITED = "exited"  # server -> supervisor: {"exited": pid, "status": wait status}
REQUEST_SPEC = "spec"  # supervisor -> server: {"spec": a ChildSpec, "env": the run's added environment}
REQUEST_ENV = "env"
REQUEST_JOIN = "join"  # supervisor -> server: the cgroup.procs file the forked child writes its pid to first ("": none)
SERVER_STATUS = "status"  # with SERVER_EXITED: the exit code (negative: killed by that signal)
