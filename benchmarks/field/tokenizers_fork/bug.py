"""tokenizers encodes a batch on its rayon pool, the process forks, the child encodes: the child hangs.

Upstream: huggingface/tokenizers#187 ("python version hangs on encode_batch when run in
subprocess"). The Rust tokenizers run encode_batch on rayon's global thread pool, which
starts with the first parallel call. A forked child inherits the pool's registry (job
queue, sleep state) but none of its worker threads, so the child's encode_batch injects
its job into that registry and blocks on a LockLatch that only a worker would set: the
child's main thread waits in rayon_core's LockLatch::wait_and_reset forever.
tokenizers' own guard (a pthread_atfork child handler that turns parallelism off in the
child once the pool was used; older releases also printed "The current process just got
forked, after parallelism has already been used. Disabling parallelism to avoid
deadlocks...") is skipped when TOKENIZERS_PARALLELISM is set explicitly, which is what
users do to silence that warning (and what NVIDIA-NeMo/Megatron-Bridge#5328 reports a
library doing for them): then the hang of #187 is back. The parent only waits for the child.
"""

import os
import sys

os.environ["TOKENIZERS_PARALLELISM"] = "true"  # set to silence the fork warning: disables the guard
os.environ.setdefault("RAYON_NUM_THREADS", "2")
from _corpus import BATCH, make_tokenizer, native_threads  # noqa: E402

tok = make_tokenizer()
assert len(tok.encode_batch(BATCH)) == len(BATCH)  # the parent's rayon pool now exists
assert native_threads() > 1, "rayon's workers did not start"
pid = os.fork()
if pid == 0:
    tok.encode_batch(BATCH)  # hangs: the job waits for workers that did not survive fork
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
