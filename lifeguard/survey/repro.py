"""Standalone reproduction scripts of candidate bugs: plain Python and the package, no lifeguard.

DIR/repro/<package>-<probe>.py imports the module, runs the hook (its file's text is copied in) and then
the probe's body written out in plain Python, under the probes' conditions: it runs itself again under
``-X dev -X faulthandler`` and PYTHONMALLOC=debug when started without them. DIR/repro/<package>-<probe>.txt
beside it holds what the survey saw: the outcome, the reason, the findings and the evidence folder.

Each probe mode needs its body here (BODIES); a mode without one gets a script that says so instead of a
guess at what the mode did.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from lifeguard.child import fork_schedule
from lifeguard.model.result import RunResult
from lifeguard.survey.hooking import hook_source
from lifeguard.survey.plan import Probed

HEADER = '''#!/usr/bin/env python3
"""Reproduces the {probe} probe's failure of {package} {version} (module {module}); found by a survey.

Needs only {package}=={version}. Run: python {name}
The survey saw: {outcome}{phase}: {reason}
(Its evidence and findings: {name_txt}, beside this file.)
"""

from __future__ import annotations

import os
import sys

# The survey's conditions: debug allocator hooks and dev mode make a use-after-free show.
if not sys.flags.dev_mode or os.environ.get("PYTHONMALLOC") != "debug":
    os.environ["PYTHONMALLOC"] = "debug"
    os.execv(sys.executable, [sys.executable, "-X", "dev", "-X", "faulthandler", *sys.argv])

import gc  # noqa: E402
import importlib  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

# The hook ({hook_where}): what a typical program does with the package.
HOOK_SOURCE = {source}
_hook_namespace = {{"__name__": "survey_hook"}}
exec(compile(HOOK_SOURCE, {hook_path!r}, "exec"), _hook_namespace)
hook = _hook_namespace[{qualname!r}]



class ProbeContext:
    """What lifeguard's probe hands a two-argument hook: the mode, and callbacks for native code to keep."""

    def __init__(self, kind):
        self.kind = kind
        self.pid = os.getpid()
        self.calls = 0

    @property
    def forked(self):
        return os.getpid() != self.pid

    def callback(self, *objects):
        def probe_callback(*args, **kwargs):
            self.calls += 1
            return len(objects)
        return probe_callback


probe = ProbeContext({probe!r})
_arguments = hook.__code__.co_argcount if hasattr(hook, "__code__") else 1

# When lifeguard's fork probes fork, copied from it: once the hook's threads have run, FORKS times over
# FORK_WINDOW s, at moments the survey's run seed picked (SEED).
SEED = {seed}
{fork_schedule}

module = importlib.import_module({module!r})
kept = []  # what the hook made, alive until the interpreter finalizes
hook_threads = []  # the native threads the hook started in this process
hook_returned = 0.0


def exercise():
    global hook_returned
    before = set(task_ids())
    made = hook(module, probe) if _arguments >= 2 else hook(module)
    if not probe.forked:
        hook_threads.extend(tid for tid in task_ids() if tid not in before and tid not in hook_threads)
        hook_returned = hook_returned or time.monotonic()
    return made


def wait_for_child(pid):
    """Wait (bounded) for the forked child; fail if it failed."""
    deadline = time.monotonic() + {child_timeout}
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                sys.exit(f"the forked child {{pid}} ended with {{code}}")
            return
        time.sleep(0.01)
    sys.exit(f"the forked child {{pid}} did not finish within {child_timeout} s (it is still there: attach a "
             "debugger to see where it waits)")


def fork_as_the_probe(in_child, after_first=None):
    """Fork as the probe did, one child at a time: the child does ``in_child()`` (True there), the parent waits
    for it, and after the first child ``after_first()`` (False in the parent, once every child ended well)."""
    waited = wait_until_ran(hook_threads, THREADS_RUN_WAIT)
    print(f"waited {{waited:.3f}} s for the hook's {{len(hook_threads)}} thread(s) to have run", file=sys.stderr)
    began = time.monotonic()
    for number, moment in enumerate(fork_moments(SEED, FORKS, FORK_WINDOW)):
        time.sleep(max(0.0, began + moment - time.monotonic()))
        print(f"fork {{number + 1}} of {{FORKS}}, {{time.monotonic() - hook_returned:.3f}} s after the hook returned; "
              f"its threads [name, state, CPU ns]: {{threads_seen(hook_threads)}}", file=sys.stderr, flush=True)
        pid = os.fork()
        if pid == 0:
            in_child()
            return True
        wait_for_child(pid)
        if number == 0 and after_first is not None:
            after_first()
    return False
'''

BODIES = {
    "exit": '''
kept.append(exercise())
# Returning now: finalization destroys what the hook made and the callbacks it handed on.
''',
    "fork-use": '''
kept.append(exercise())  # the module's threads are running now


def use_in_child():
    kept.append(exercise())  # the forked child uses the module, then exits normally


fork_as_the_probe(use_in_child, lambda: kept.append(exercise()))  # the parent's module still works
''',
    "fork-finalize": '''
kept.append(exercise())


def drop_in_child():
    kept.clear()  # the child never calls the module: it drops what it inherited and finalizes normally
    gc.collect()


fork_as_the_probe(drop_in_child)
''',
    "fork-exit": '''
kept.append(exercise())
fork_as_the_probe(lambda: os._exit(0))  # the child leaves at once: only the atfork handlers run in it
''',
    "gc-thread": '''
exercise()  # a warm-up call on the main thread: first-call imports happen before the collector starts
stop = threading.Event()


def collect_until_stopped():
    while not stop.wait({collector_pause}):
        gc.collect()


gc.disable()  # only the collector thread collects: every cycle dies there
collector = threading.Thread(target=collect_until_stopped, name="collector", daemon=True)
collector.start()
deadline = time.monotonic() + {gc_seconds}
for _ in range({gc_rounds}):
    if time.monotonic() > deadline:
        break
    box = [exercise()]
    box.append(box)  # reachable only from a cycle: freed on the collector thread
    del box
stop.set()
collector.join()
gc.enable()
''',
    "gc-cycle": '''
deadline = time.monotonic() + {gc_seconds}
for _ in range({gc_rounds}):
    if time.monotonic() > deadline:
        break
    box = [exercise()]
    box.append(box)  # reachable only from a cycle: freed by the collection on this (the main) thread
    del box
    gc.collect()
''',
}


def _docstring_safe(text: str) -> str:
    """A child's one-line reason, safe inside the script's docstring (no controls, quotes or escapes)."""
    line = "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))[:300]
    return line.replace("\\", "\\\\").replace('"""', "'''")


def _literal(text: str) -> str:
    """``text`` as a readable Python literal: a raw triple-quoted string when it can be one."""
    if "'''" not in text and "\\" not in text and not text.endswith("'"):
        return "r'''" + text + "'''"
    return repr(text)


def fork_schedule_text() -> str:
    """child.fork_schedule's constants and functions as a script's text: a reproduction forks as the probe did."""
    lines = [f"import {name}  # noqa: E402" for name in fork_schedule.REPRODUCED_IMPORTS
             if not re.search(rf"^import {name}\b", HEADER, re.MULTILINE)]
    lines += [f"{name} = {value!r}" for name, value in fork_schedule.REPRODUCED_CONSTANTS.items()]
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(inspect.getsource(function)
                                                   for function in fork_schedule.REPRODUCED_FUNCTIONS)


def write_reproduction(folder: Path, probed: Probed, run: RunResult, timeout: float | None = None) -> str:
    """The script and its notes for ``probed``'s failed ``run`` (of the survey's ``timeout`` per run, its forked
    child's deadline a share of it as in the probe); the script's path."""
    from lifeguard.child.probe import COLLECTOR_PAUSE
    from lifeguard.plan.probes import DEFAULT_TIMEOUT, FORK_CHILD_SHARE, GC_ROUNDS, GC_SECONDS

    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{probed.package.name}-{probed.probe}")
    if len({probed.module} | set(probed.package.targets)) > 1:
        stem += "-" + re.sub(r"[^A-Za-z0-9_]", "_", probed.module)  # several modules probed: one script each
    script, notes = folder / f"{stem}.py", folder / f"{stem}.txt"
    hook = probed.package.hook
    phase = f" at {run.phase.value}" if run.phase is not None else ""
    text = HEADER.format(probe=probed.probe, package=probed.package.name, version=probed.package.version,
                         module=probed.module, name=script.name, name_txt=notes.name, outcome=run.outcome.value,
                         phase=phase, reason=_docstring_safe(run.reason),
                         hook_where=f"{hook.source} hook, {hook.path}" if hook else "no hook",
                         source=_literal(hook_source(hook) if hook else ""),
                         hook_path=hook.path if hook else "<no hook>", qualname=hook.qualname if hook else "hook",
                         child_timeout=round((timeout or DEFAULT_TIMEOUT) * FORK_CHILD_SHARE, 1), seed=run.seed,
                         fork_schedule=fork_schedule_text())
    if hook is None:
        text = text.replace("hook = _hook_namespace[", "hook = lambda module: None  # ")
    body = BODIES.get(probed.probe)
    if body is None:
        text += f"\nsys.exit('no standalone body for the {probed.probe} probe yet: see {notes.name}')\n"
    else:
        text += body.format(gc_rounds=GC_ROUNDS, gc_seconds=GC_SECONDS, collector_pause=COLLECTOR_PAUSE)
    script.write_text(text, encoding="utf-8")
    script.chmod(0o755)
    notes.write_text(_notes(probed, run), encoding="utf-8")
    return str(script)


def _notes(probed: Probed, run: RunResult) -> str:
    lines = [f"{probed.package.name} {probed.package.version}, module {probed.module}, probe {probed.probe}",
             f"outcome: {run.outcome.value}" + (f" at {run.phase.value}" if run.phase else ""),
             f"reason: {run.reason}", f"evidence folder: {run.run_dir}"]
    if run.fatal_error:
        lines.append(f"fatal error: {run.fatal_error}")
    for finding in run.findings:
        lines += ["", str(finding), f"  hint: {finding.hint}", *(f"  {frame}" for frame in finding.frames[:12])]
    if run.stderr_tail:
        lines += ["", "stderr (tail):", run.stderr_tail[-4000:]]
    return "\n".join(lines) + "\n"
