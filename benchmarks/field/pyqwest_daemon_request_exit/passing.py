"""The same request as bug.py, on a non-daemon thread that ends before the interpreter exits.

The fix the report and pyqwest's maintainers point to: do not leave a request in flight on a
daemon thread at exit; let the thread finish (join it) before the interpreter finalizes. Here
the server drops the connection while the program is still running, the request fails with a
pyqwest error that the thread handles, and the main thread joins it before exiting.
"""

import threading

import pyqwest
from _status import StatusServer

server = StatusServer()
client = pyqwest.SyncClient()
outcome = []


def fetch() -> None:
    try:
        client.get(server.url, timeout=30.0)
    except Exception as error:  # noqa: BLE001 - the dropped connection is the expected end
        outcome.append(type(error).__name__)


worker = threading.Thread(target=fetch)
worker.start()
conn = server.wait_for_request()
conn.close()  # the request fails while the interpreter is still fully alive
worker.join()
print(f"request ended before exit ({outcome[0] if outcome else 'ok'}); thread joined")
