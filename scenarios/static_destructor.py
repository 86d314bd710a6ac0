"""A C++ static pool releases Python callables after Py_Finalize.

The onnxruntime OrtTorchFunctionPool incident: a function-local static
singleton keeps new references to the `apply` and `backward` of every
registered autograd Function, in unique_ptrs whose deleter calls Py_DECREF.
Nothing unregisters them, so exit() runs the pool's destructor after the
interpreter is gone and the last Py_DECREF deallocates into a dead interpreter.
The fixed build empties the pool from an atexit callback, while Python still
works.

What the buggy build does at exit, per Python version:
- a bound `apply` method: SIGSEGV in PyObject_GC_Del (no thread state, so no
  gc state) on 3.10 to 3.13;
- plain closures: on 3.10 and 3.11 the incident's own path, func_dealloc ->
  tupledealloc, whose trashcan calls PyThreadState_Get: "Fatal Python error:
  PyThreadState_Get: the function must be called with the GIL held ..." and
  SIGABRT; on 3.12 and 3.13 SIGSEGV earlier in func_dealloc, which looks up
  the interpreter to notify function watchers.
Each crash needs the pool to hold the last reference: a release that only
decrements a count into dead memory goes unnoticed. So every scenario drops
Python's own references and checks that only the pool's remain.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import lifeguard
from lifeguard import child

# Deterministic on every supported version: the pool always holds the last
# reference, and releasing it always reaches interpreter state that is gone.
EXPECT = {"buggy": "crashed@exit", "fixed": "passed"}
REPEAT = {"buggy": 20, "fixed": 50}
TIMEOUT = 10


def _define_autograd_function() -> type:
    """A class shaped like torch.autograd.Function: classmethod apply, static backward."""

    class ScaleByTwo:
        @staticmethod
        def forward(saved: list[float], value: float) -> float:
            saved.append(value)
            return value * 2

        @classmethod
        def apply(cls, value: float) -> tuple[float, list[float]]:
            saved: list[float] = []  # stands in for the autograd context
            return cls.forward(saved, value), saved

        @staticmethod
        def backward(saved: list[float], grad: float) -> float:
            return grad * 2

    return ScaleByTwo


def _make_scale_closures(factor: float) -> Any:
    """An object whose apply and backward are closures: nothing else owns them."""

    def apply(*values: float) -> tuple[float, ...]:
        return tuple(value * factor for value in values)

    def backward(*grads: float) -> tuple[float, ...]:
        return tuple(grad * factor for grad in grads)

    return types.SimpleNamespace(apply=apply, backward=backward)


def _register_as_only_owner(fx: Any, name: str, make: Callable[[], Any]) -> None:
    """Register make()'s result and check that only the pool keeps its callables."""
    fx.register_function(name, make())
    forward_count, backward_count = fx.reference_counts(name)
    child.note(f"{name}: refcounts apply={forward_count} backward={backward_count}")
    # A refcount of 1 is the pool's own reference: its release at exit must
    # deallocate, which is what touches the dead interpreter.
    if forward_count != 1:
        raise AssertionError(f"{name}: something besides the pool owns apply ({forward_count} refs)")


@lifeguard.scenario(fixture="static_destructor", expect=EXPECT, timeout=TIMEOUT, repeat=REPEAT)
def pool_outlives_interpreter(fx: Any) -> None:
    """A registered autograd-Function-like class is released by the pool's static destructor."""
    _register_as_only_owner(fx, "scale_by_two", _define_autograd_function)
    if fx.size() != 1:
        raise AssertionError(f"pool holds {fx.size()} functions, expected 1")


@lifeguard.scenario(fixture="static_destructor", expect=EXPECT, timeout=TIMEOUT, repeat=REPEAT)
def function_called_before_exit(fx: Any) -> None:
    """Forward and backward run through the pool for a few steps, then the process exits."""
    _register_as_only_owner(fx, "scale_by_two", _define_autograd_function)
    for step in range(5):
        output, saved = fx.call_forward("scale_by_two", float(step))
        grad = fx.call_backward("scale_by_two", saved, 1.0)
        if (output, saved, grad) != (2.0 * step, [float(step)], 2.0):
            raise AssertionError(f"step {step}: got {(output, saved, grad)}")


@lifeguard.scenario(fixture="static_destructor", expect=EXPECT, timeout=TIMEOUT, repeat=REPEAT)
def closures_released_after_finalize(fx: Any) -> None:
    """Closures owned only by the pool die in exit(): the incident's func_dealloc -> tupledealloc."""
    for factor in (3.0, 5.0):
        name = f"scale_by_{int(factor)}"
        _register_as_only_owner(fx, name, lambda factor=factor: _make_scale_closures(factor))
        if fx.call_forward(name, 1.0, 2.0) != (factor, 2 * factor):
            raise AssertionError(f"{name}: wrong forward result")
        if fx.call_backward(name, 1.0) != (factor,):
            raise AssertionError(f"{name}: wrong backward result")
    if fx.names() != ["scale_by_3", "scale_by_5"]:
        raise AssertionError(f"unexpected registrations {fx.names()}")
