"""The generic hook: import the module, then exercise what can be used without knowing the package.

The rule, so that nothing it calls can delete files, block, exit, fork or reach the network:
- only what is implemented in native code: classes whose ``__init__`` is not Python code, and builtin
  functions (Python-level functions of the package are skipped: they may do anything);
- only public names (no leading underscore) defined by the package itself (``__module__`` under it);
- only calls without arguments: a class is instantiated as ``cls()``, a builtin function is called only when
  its signature says it takes none (``__text_signature__``); anything without a signature is left alone;
- never a name with a word of DENIED in it (file, process, thread, network, lifetime and state changes);
- never an exception class; at most MAX_CALLS calls per hook call; an exception a call raises (a class that
  needs arguments) is swallowed: introspection is not the package's contract.
It returns every object made, so the probes keep or drop them as they do a real hook's.
"""

from __future__ import annotations

import inspect
import re
import types
from typing import Any

MAX_CALLS = 40
DENIED = re.compile(
    r"remove|delete|unlink|rmdir|rmtree|purge|clear|reset|kill|terminat|exit|abort|quit|fork|exec|spawn|system|"
    r"popen|shell|wait|sleep|join|block|serve|server|listen|accept|connect|socket|recv|send|read|write|input|"
    r"lock|acquire|shutdown|close|flush|sync|main|run|loop|start|stop|install|set|seed|signal|daemon|thread|"
    r"process|file|open|save|dump|load|download|upload|request|mount|chdir|chmod|chown|rename|move|copy|"
    r"truncate|free|destroy|dealloc|finaliz|atexit|register|hook|trace|debug|crash|segfault|interrupt",
    re.IGNORECASE)
NO_ARGUMENTS = ("($module, /)", "($module)", "()", "($self, /)", "($type, /)")

_candidates: dict[str, list[Any]] = {}


def _native_class(obj: Any) -> bool:
    if not inspect.isclass(obj) or issubclass(obj, BaseException):
        return False
    return not any(isinstance(vars(klass).get(name), types.FunctionType)
                   for klass in obj.__mro__ if klass is not object for name in ("__init__", "__new__"))


def _callable_without_arguments(obj: Any) -> bool:
    return isinstance(obj, types.BuiltinFunctionType) and getattr(obj, "__text_signature__", None) in NO_ARGUMENTS


def candidates(module: Any) -> list[Any]:
    """The module's callables that the rule allows, found once per module."""
    if module.__name__ not in _candidates:
        top = module.__name__.split(".")[0]
        found = []
        for name in sorted(dir(module)):
            if name.startswith("_") or DENIED.search(name):
                continue
            try:
                obj = getattr(module, name, None)
                owner = getattr(obj, "__module__", None)
                if not isinstance(owner, str):  # not a plain definition (lxml.builder's E: a partial object)
                    continue
                if owner != top and not owner.startswith(top + ".") and owner != module.__name__:
                    continue  # re-exported from elsewhere (the standard library, another package)
                if _native_class(obj) or _callable_without_arguments(obj):
                    found.append(obj)
            except Exception:  # noqa: BLE001 - a lazy attribute that fails to load: not one to call
                continue
        _candidates[module.__name__] = found[:MAX_CALLS]
    return _candidates[module.__name__]


def hook(module: Any) -> list[Any]:
    made = []
    for target in candidates(module):
        try:
            made.append(target())
        except Exception:  # noqa: BLE001 - a class that needs arguments, a function that refuses
            continue
    return made
