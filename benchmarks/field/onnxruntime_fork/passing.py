"""The same work as bug.py, done the fixed way: the child makes its own session after fork.

onnxruntime's thread pools do not survive fork (microsoft/onnxruntime#9800, and #31961:
"Applications should create sessions after fork"). A session created in the child gets a
pool with live threads; the inherited one is left alone (neither run nor destroyed: the
child leaves with os._exit).
"""

import os
import sys

from _model import inputs, model_bytes, parallel_session

model = model_bytes()
session = parallel_session(model)
session.run(None, inputs())
pid = os.fork()
if pid == 0:
    parallel_session(model).run(None, inputs())  # a fresh pool, started in this process
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
