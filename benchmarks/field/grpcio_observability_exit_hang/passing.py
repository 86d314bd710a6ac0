"""The same call as bug.py, with the plugin used as a context manager (deregistered before exit).

The maintainers' answer in grpc/grpc#38500: deregister the global plugin before the process
exits. `with OpenTelemetryPlugin():` registers it and, on leaving the block, calls
end_open_telemetry_observability(), which sets the export thread's shutdown flag and joins it,
so the interpreter's exit has no thread left to wait for.
"""

import grpc
import grpc_observability
from _echo import call_echo

with grpc_observability.OpenTelemetryPlugin():
    reply = call_echo(b"hello")
print(f"grpcio {grpc.__version__}: {reply.decode()}; plugin deregistered, export thread joined", flush=True)
