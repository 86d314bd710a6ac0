"""The output relay keeps the head and the newest tail of a stream within its cap, with a line saying how
much was dropped between them (pipes and threads of this process: no child)."""

from __future__ import annotations

import _thread
import os
import threading
from pathlib import Path

from lifeguard.pytest_plugin.guard import foreign_threads, note_harness_threads
from lifeguard.run.relay import _JOINED_PUMPS, Relays, joined_pumps
from tests.unit.test_protocol import spec_for_test


class Collect:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        self.closed = 0

    def write(self, spec: object, stream: str, data: bytes) -> None:
        self.data[stream] += data

    def close(self, spec: object) -> None:
        self.closed += 1


def _relay(tmp_path: Path, cap: int, live: Collect | None = None) -> tuple[Relays, Path, Path]:
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    relays = Relays(spec_for_test(tmp_path), out, err, cap, live)
    return relays, out, err


def test_what_fits_is_kept_whole_and_handed_on_live(tmp_path: Path) -> None:
    live = Collect()
    relays, out, err = _relay(tmp_path, 1000, live)
    os.write(relays.child_ends[0], b"hello\n")
    os.write(relays.child_ends[1], b"oops\n")
    relays.close()
    assert out.read_bytes() == b"hello\n" and err.read_bytes() == b"oops\n"
    assert live.data == {"stdout": b"hello\n", "stderr": b"oops\n"} and live.closed == 1


def test_a_flood_keeps_head_and_tail_within_the_cap(tmp_path: Path) -> None:
    relays, out, _ = _relay(tmp_path, 1000)
    writer = relays.child_ends[0]
    os.write(writer, b"HEAD" + b"a" * 996)
    for _ in range(200):
        os.write(writer, b"b" * 4096)
    os.write(writer, b"c" * 500 + b"TAIL")
    relays.close()
    data = out.read_bytes()
    assert data.startswith(b"HEAD") and data.endswith(b"TAIL")
    assert len(data) <= 1000 + 80
    dropped = 1000 + 200 * 4096 + 504 - 1000
    assert f"[lifeguard: {dropped} bytes of output dropped here]".encode() in data


def test_the_file_never_holds_more_than_the_head_while_the_stream_is_open(tmp_path: Path) -> None:
    relays, out, _ = _relay(tmp_path, 1000)
    writer = relays.child_ends[0]
    for _ in range(100):
        os.write(writer, b"z" * 4096)
    size_while_open = out.stat().st_size  # the relay may still be behind: never ahead of the head
    relays.close()
    assert size_while_open <= 500


def test_a_closed_relay_names_its_joined_pump(tmp_path: Path) -> None:
    relays, _, _ = _relay(tmp_path, 1000)
    relays.close()
    assert relays._thread is not None and relays._thread.native_id in joined_pumps()


def test_a_joined_pump_whose_task_lingers_is_not_a_foreign_thread() -> None:
    # A joined thread's task stays in /proc/self/task a moment (often, on a loaded machine): a task held
    # alive here plays that moment, once as an unknown native thread, once as a pump joined already.
    note_harness_threads()
    started, release = _thread.allocate_lock(), _thread.allocate_lock()
    started.acquire()
    release.acquire()
    native_id: list[int] = []

    def linger() -> None:
        native_id.append(threading.get_native_id())
        started.release()
        release.acquire()

    _thread.start_new_thread(linger, ())
    try:
        assert started.acquire(timeout=30)
        assert foreign_threads() == ["1 native thread(s)"]
        _JOINED_PUMPS.append(native_id[0])
        assert foreign_threads() == []
    finally:
        _JOINED_PUMPS.clear()
        release.release()
