"""What a probe's hook did with its module, counted in the child as it happens (protocol.PROBE_EXERCISED): the
module's calls (a profile function while the hook runs), the objects returned, the native threads before and
after, and the state of the threads the hook started (from /proc, without importing anything for it).

Standard library and ``lifeguard.child`` only.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from lifeguard.child.fork_schedule import task_ids, threads_seen

# Containers the objects a hook returns are counted through, this deep.
RETURNED_DEPTH = 2


class Exercise:
    """What the hook did with the module in this process: the PROBE_EXERCISED record, counted as it happens."""

    def __init__(self, module: Any, hook: Callable[..., Any] | None) -> None:
        self.module = module
        self.hook_code = getattr(getattr(hook, "__func__", hook), "__code__", None)
        self.top = module.__name__.split(".")[0]
        self.types = {value for value in vars(module).values() if isinstance(value, type)}
        self.calls = 0
        self.raised = 0
        self.returned = 0
        self.of_module = 0
        self.threads_before = native_thread_count()
        self.threads_after = self.threads_before
        self.hook_tids: list[int] = []
        self.waited = 0.0

    def _ours(self, name: Any) -> bool:
        return isinstance(name, str) and (name == self.top or name.startswith(self.top + "."))

    def _of_module_type(self, klass: type) -> bool:
        return klass in self.types or self._ours(getattr(klass, "__module__", None))

    def is_modules(self, func: Any) -> bool:
        """A builtin function or method of the module's package (or of a type it defines)."""
        try:
            owner = getattr(func, "__self__", None)
            if isinstance(owner, types.ModuleType):
                return self._ours(owner.__name__)
            if owner is not None:
                return self._of_module_type(owner if isinstance(owner, type) else type(owner))
            return self._ours(getattr(func, "__module__", None))
        except Exception:  # noqa: BLE001 - an object whose attributes fail to load is not the module's
            return False

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":  # Python code of the module's package, entered from outside it (not the hook itself)
            caller = frame.f_back
            if (frame.f_code is not self.hook_code and self._ours(frame.f_globals.get("__name__"))
                    and (caller is None or not self._ours(caller.f_globals.get("__name__")))):
                self.calls += 1
        elif event == "c_call" and self.is_modules(arg):
            self.calls += 1
        elif event == "c_exception" and self.is_modules(arg):
            self.raised += 1

    def call(self, hook: Callable[[], Any]) -> Any:
        """``hook()``, its calls of the module counted, and its result's objects."""
        before = set(task_ids())
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            made = hook()
        finally:
            sys.setprofile(previous)
        items = _returned_items(made, RETURNED_DEPTH)
        self.returned += len(items)
        self.of_module += sum(1 for item in items if self._of_module_type(type(item)))
        self.hook_tids += [tid for tid in task_ids() if tid not in before and tid not in self.hook_tids]
        self.threads_after = native_thread_count()
        return made

    def exercised(self, callback_calls: int) -> bool:
        return self.calls > self.raised or self.of_module > 0 or callback_calls > 0

    def why_not(self, kind: str, hooked: bool, callback_calls: int) -> str:
        """Why the ``kind`` probe exercised nothing of the module, with its figures; "" when it did."""
        if self.exercised(callback_calls):
            return ""
        name = self.module.__name__
        returned = f"returned {self.returned} object(s), none of {name}'s, and no callback was called"
        if not hooked:
            did = "no hook was given: importing it is all the probe did"
        elif self.calls:
            did = f"all {self.calls} call(s) of it raised; the hook {returned}"
        else:
            did = f"the hook made 0 calls of it and {returned}"
        return f"the {kind} probe used nothing of {name}: {did}"

    def record(self, kind: str, hooked: bool, callback_calls: int) -> dict[str, Any]:
        return {"probe": kind, "exercised": self.exercised(callback_calls), "calls": self.calls,
                "raised": self.raised, "callback_calls": callback_calls, "returned": self.returned,
                "of_module": self.of_module, "threads_before": self.threads_before,
                "threads_after": self.threads_after, "hook_threads": threads_seen(self.hook_tids),
                "waited": round(self.waited, 4),
                "why": self.why_not(kind, hooked, callback_calls)}


def _returned_items(value: Any, depth: int) -> list[Any]:
    if value is None:
        return []
    if depth and isinstance(value, (list, tuple, set, frozenset)):
        return [item for element in value for item in _returned_items(element, depth - 1)]
    if depth and isinstance(value, dict):
        return [item for element in value.values() for item in _returned_items(element, depth - 1)]
    return [value]


def native_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()
