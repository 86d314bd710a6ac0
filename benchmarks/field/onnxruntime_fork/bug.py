"""An onnxruntime session made and run in the parent, run again in a forked child: it hangs.

Upstream: microsoft/onnxruntime#9800 ("Onnx runtime threading is broken in gunicorn":
inter_op_num_threads >= 2 with ORT_PARALLEL execution "causes whole server to stuck
infinitely in InferenceSession#run"; gunicorn --preload forks workers from a master that
made the session). The session owns an inter-op thread pool whose worker threads exist only
in the parent. In the forked child, run() queues the graph's nodes on the inherited pool
and then spins (SpinPause) waiting for workers that are not there: the child's main thread
busy-waits in onnxruntime_pybind11_state.so forever.
"""

import os
import sys

from _model import inputs, model_bytes, parallel_session

session = parallel_session(model_bytes())
session.run(None, inputs())  # the parent's inter-op pool threads exist and have run tasks
pid = os.fork()
if pid == 0:
    session.run(None, inputs())  # hangs: queued on a pool whose threads did not survive fork
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
