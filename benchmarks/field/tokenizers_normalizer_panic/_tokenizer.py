"""A small character-level BPE tokenizer, shared by bug.py and passing.py.

`make_tokenizer(normalizers)` returns a Tokenizer whose normalizer is the given sequence; the
model knows the lowercase letters, the space and "[UNK]", so no file or download is needed.
"""

import string

from tokenizers import Tokenizer
from tokenizers.models import BPE
from tokenizers.normalizers import Sequence

TEXT = "Sample Text"


def make_tokenizer(normalizers: list) -> Tokenizer:
    """A BPE tokenizer over single characters, with `normalizers` applied in order."""
    alphabet = ["[UNK]", " ", *string.ascii_lowercase]
    tokenizer = Tokenizer(BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[], unk_token="[UNK]"))
    tokenizer.normalizer = Sequence(normalizers)
    return tokenizer
