"""Early hang detection's rule on made-up /proc readings: what counts as still, what as merely slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeguard.proc.threadread import ThreadReading
from lifeguard.run import stillness
from lifeguard.run.stillness import IDLE_CPU_SHARE, Stillness

SETTLE = 2.0
LOOK = 0.25  # the supervisor's wait-loop wake (supervise.POLL_INTERVAL)


def blocked(cpu: float = 0.0, syscall: str = "futex") -> ThreadReading:
    return ThreadReading(state="S", syscall=syscall, wchan="futex_wait_queue", cpu=cpu)


def watch(monkeypatch: pytest.MonkeyPatch, readings: list[dict[tuple[int, int], ThreadReading]],
          outputs: tuple[Path, ...] = ()) -> list[float]:
    """How long the tree was still at each look, one reading per look, LOOK seconds apart."""
    feed = iter(readings)
    monkeypatch.setattr(stillness, "read_tree", lambda pids: next(feed))
    watcher = Stillness(SETTLE, list(outputs))
    return [watcher.look([1], now=index * LOOK) for index in range(len(readings))]


def test_a_tree_asleep_on_futexes_is_still_from_the_first_look(monkeypatch: pytest.MonkeyPatch) -> None:
    looks = watch(monkeypatch, [{(1, 1): blocked(), (1, 2): blocked(syscall="wait4")}] * 10)
    assert looks[0] == 0.0 and looks[-1] == pytest.approx(9 * LOOK)


def test_gil_waiters_polling_a_little_stay_still(monkeypatch: pytest.MonkeyPatch) -> None:
    share = IDLE_CPU_SHARE / 4  # a thread waking every 5 ms to ask for the GIL
    looks = watch(monkeypatch, [{(1, 1): blocked(cpu=share * LOOK * n)} for n in range(10)])
    assert looks[-1] == pytest.approx(9 * LOOK)


@pytest.mark.parametrize("moving", [
    ThreadReading(state="R", syscall=None, wchan=None, cpu=0.0),  # runnable: computing
    blocked(syscall="clock_nanosleep"),  # time.sleep: waiting for the clock, which will come
    blocked(syscall="nanosleep"),
    ThreadReading(state="D", syscall="read", wchan="io_schedule", cpu=0.0),  # disk I/O
    ThreadReading(state="T", syscall=None, wchan=None, cpu=0.0),  # stopped: not ours to call hung early
])
def test_one_thread_that_is_not_blocked_keeps_the_tree_moving(monkeypatch: pytest.MonkeyPatch,
                                                               moving: ThreadReading) -> None:
    assert set(watch(monkeypatch, [{(1, 1): blocked(), (2, 7): moving}] * 10)) == {0.0}


def test_cpu_time_new_threads_and_output_restart_the_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    busy = [{(1, 1): blocked(cpu=0.05 * n)} for n in range(10)]  # 20% of a CPU, in short bursts between looks
    assert max(watch(monkeypatch, busy)) == 0.0
    threads = [{(1, 1): blocked(), (1, 10 + n): blocked()} for n in range(10)]  # a thread started at every look
    assert max(watch(monkeypatch, threads)) == 0.0
    out = tmp_path / "stdout.txt"
    out.write_text("")

    def printing() -> dict[tuple[int, int], ThreadReading]:
        with open(out, "a") as f:  # the program prints between two looks
            f.write("tick\n")
        return {(1, 1): blocked()}

    feed = iter(range(10))
    monkeypatch.setattr(stillness, "read_tree", lambda pids: (next(feed), printing())[1])
    watcher = Stillness(SETTLE, [out])
    assert max(watcher.look([1], now=n * LOOK) for n in range(10)) == 0.0


def test_zombies_are_ignored_but_an_empty_tree_is_not_still(monkeypatch: pytest.MonkeyPatch) -> None:
    zombie = ThreadReading(state="Z", syscall=None, wchan=None, cpu=0.0)
    assert watch(monkeypatch, [{(1, 1): blocked(), (2, 2): zombie}] * 3)[-1] == pytest.approx(2 * LOOK)
    assert set(watch(monkeypatch, [{(2, 2): zombie}] * 3)) == {0.0}


def test_hung_says_so_once_the_settle_period_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stillness, "read_tree", lambda pids: {(1, 1): blocked()})
    clock = iter([0.0, 1.0, SETTLE - 0.01, SETTLE + 0.01])
    monkeypatch.setattr(stillness.time, "monotonic", lambda: next(clock))
    watcher = Stillness(SETTLE, [])
    assert [watcher.hung([1]) for _ in range(4)] == [False, False, False, True]
    assert watcher.ended
