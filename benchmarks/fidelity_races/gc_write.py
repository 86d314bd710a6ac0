"""A destructor freed by gc on another thread writes to a channel its owner is writing to (cross-thread-gc-write).

The main thread owns the channel and writes records to it without the GIL; a Ref whose destructor writes a
record of its own is dropped into a reference cycle (through a swallowed exception's traceback), so gc frees
it on whichever thread collects: when that is the worker thread, during an owner write, records interleave.
Exits 1 when the channel holds a broken record, else 0.

    python gc_write.py BUILD_DIR [ROUNDS]
"""

import sys
import threading

sys.path.insert(0, sys.argv[1])
import races  # noqa: E402

rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
RECORD = b"OWNER" * 6 + b"\n"
races.channel_open(rounds * 400 + 100_000)
stop = threading.Event()


def allocate() -> None:  # another thread's own work: its allocations trigger collections there
    while not stop.is_set():
        _ = [(i,) for i in range(50)]


def leak_into_cycle() -> None:
    ref = races.Ref()
    try:
        raise ValueError(ref)
    except ValueError as exc:
        ref.error = exc  # ref -> exception -> traceback -> this frame -> ref


worker = threading.Thread(target=allocate)
worker.start()
for _ in range(rounds):
    leak_into_cycle()
    for _ in range(8):
        races.channel_write(RECORD)
stop.set()
worker.join()
broken = [line for line in races.channel_read().split(b"\n")[:-1]
          if line not in (RECORD[:-1], b"FREE" * 8)]
sys.exit(1 if broken else 0)
