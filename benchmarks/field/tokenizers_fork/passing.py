"""The same encode_batch / fork / encode_batch as bug.py, with tokenizers' fork guard left on.

The fix of huggingface/tokenizers#187: TOKENIZERS_PARALLELISM is not forced, so tokenizers'
fork handler sees that the pool was used before the fork and turns parallelism off in the
child (0.23.3 does so silently; older releases printed "Disabling parallelism to avoid
deadlocks..."); the child encodes the batch sequentially on its own thread and finishes.
(TOKENIZERS_PARALLELISM=false before the first batch, or the 'spawn' start method, works too.)
"""

import os
import sys

os.environ.pop("TOKENIZERS_PARALLELISM", None)  # the fix: let tokenizers' fork guard work
os.environ.setdefault("RAYON_NUM_THREADS", "2")
from _corpus import BATCH, make_tokenizer, native_threads  # noqa: E402

tok = make_tokenizer()
assert len(tok.encode_batch(BATCH)) == len(BATCH)
assert native_threads() > 1, "rayon's workers did not start"
pid = os.fork()
if pid == 0:
    os._exit(0 if len(tok.encode_batch(BATCH)) == len(BATCH) else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
