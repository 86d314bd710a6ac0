"""grpcio-observability's global OpenTelemetry plugin, never deregistered: the interpreter never exits.

Upstream: grpc/grpc#38500 ("OpenTelemetryPlugin.register_global causes hang on process exit if
not explicitly deregistered", grpcio 1.69.0, open; still so in 1.85.0). register_global() starts
the plugin's export thread (_cyobservability's _start_exporting_thread: a plain, non-daemon
threading.Thread running _export_census_data, with a "TODO: change it to daemon thread"), which
waits in native code for census data until deregister_global() sets its shutdown flag. Nothing
does that at exit, so the interpreter's exit (threading._shutdown, joining every non-daemon
thread) waits for the export thread forever: the program has done its work and never ends.
"""

import grpc
import grpc_observability
from _echo import call_echo

grpc_observability.OpenTelemetryPlugin().register_global()
reply = call_echo(b"hello")
print(f"grpcio {grpc.__version__}: {reply.decode()}; main thread done", flush=True)
# no deregister_global(): the exit joins the plugin's export thread, which never ends
