"""A small in-memory word-level tokenizer and a batch of texts, shared by bug.py and passing.py.

No download: the vocabulary is made here. encode_batch over 300 texts goes through
tokenizers' MaybeParallelIterator, i.e. rayon's global thread pool when parallelism is on.
"""

import os

from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = [f"w{i}" for i in range(1000)]
BATCH = [" ".join(WORDS[i : i + 50]) for i in range(0, 900, 3)]


def make_tokenizer() -> Tokenizer:
    """A WordLevel tokenizer over WORDS, split on whitespace."""
    vocab = {w: i for i, w in enumerate(WORDS + ["[UNK]"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def native_threads() -> int:
    """The threads of this process, rayon's workers included (Linux)."""
    return len(os.listdir("/proc/self/task"))
