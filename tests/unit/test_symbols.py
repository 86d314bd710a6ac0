"""eu-addr2line's answers as frame fields: a name, or for a function's cold part only a source line."""

from __future__ import annotations

from lifeguard.capture.symbols import _location, _lookup, _named
from lifeguard.model.stacks import Frame, ProcessStacks, ThreadStack


def test_a_cold_part_keeps_its_source_line() -> None:
    assert _location("??", "/build/Objects/object.c:1630:5") == (None, "/build/Objects/object.c", 1630)
    assert _location("gomp_team_barrier_wait_end", "??:0") == ("gomp_team_barrier_wait_end", None, None)
    assert _location("??", "??:0") is None


def test_only_unnamed_frames_are_filled() -> None:
    named = Frame("take_gil", address="0x10")
    unnamed = Frame(None, address="0x20", library="/lib/libgomp.so.1")
    process = ProcessStacks(pid=1, threads=(ThreadStack(1, frames=(named, unnamed)),))
    # A caller is named by its return address minus one (see test_callers_are_looked_up_one_byte_back).
    fixed = _named(process, {"0x10": ("other", None, None), "0x1f": ("gomp_team_barrier_wait_end", None, None)})
    assert [f.function for f in fixed.threads[0].frames] == ["take_gil", "gomp_team_barrier_wait_end"]


def test_callers_are_looked_up_one_byte_back() -> None:
    """A caller's pc is a return address: one past a noreturn call that ends the function (abort), it is
    already in the next function. The innermost frame and one a signal interrupted are at their own pc."""
    frames = (Frame(None, address="0x100"), Frame(None, address="0x200"), Frame("__restore_rt", address="0x300"),
              Frame(None, address="0x400"), Frame(None, address="0x500"))
    assert [_lookup(frames, i) for i in range(len(frames))] == ["0x100", "0x1ff", "0x2ff", "0x400", "0x4ff"]
