"""A user's atexit handler that uses gevent runs after greenlet's own atexit callback: SIGSEGV.

Upstream: python-greenlet/greenlet#507 ("Segfault with greenlet 3.4.0 and gevent
monkeypatches"; the same report as gevent/gevent#2173), fixed in greenlet 3.5.0 by
python-greenlet/greenlet#508 ("Remove the atexit callback"). greenlet 3.4.0 (#499) registers
an atexit callback at import that marks greenlet as shutting down; from then on
PyGreenlet_GetCurrent() returns NULL without setting an exception. atexit runs callbacks
in reverse order of registration, so an exit handler registered before greenlet was
imported (here: a telemetry shipper imported before gevent's monkey.patch_all()) runs
after it. Its time.sleep is gevent.sleep: gevent's compiled hub (WaitOperationsGreenlet.wait
in gevent/_gevent_c_hub_primitives) gets NULL from greenlet, takes the missing exception
and crashes: SIGSEGV in PyException_SetTraceback(NULL), inside the atexit handler, at exit.
"""

import _shipper  # registers its atexit flush now, before greenlet exists
from gevent import monkey  # noqa: E402  (imports greenlet: its atexit callback is registered here)

monkey.patch_all()

import time  # noqa: E402

for step in range(3):
    time.sleep(0.001)  # gevent.sleep: works while the program runs
    _shipper.record(f"step {step} done")
print("work done; the shipper flushes at exit", flush=True)
