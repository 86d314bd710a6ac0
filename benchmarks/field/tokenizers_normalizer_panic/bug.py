"""A Replace("^" -> " ") normalizer followed by BertNormalizer: tokenizers panics in encode().

Upstream: huggingface/tokenizers#736 ("normalizers.Replace followed by
normalizers.BertNormalizer raise PanicException", tokenizers 0.10.3; closed as stale, still
there in 0.23.3; the same panic in training: huggingface/tokenizers#1348). A Replace whose
pattern matches the empty string at the start inserts a character before the first one; the
alignments of the NormalizedString then have one entry fewer than its characters, and the
next normalizer that transforms the string (BertNormalizer) indexes past their end:
"thread '<unnamed>' panicked at .../tokenizer/normalizer.rs: index out of bounds: the len is
12 but the index is 12". pyo3 turns the panic into pyo3_runtime.PanicException (a
BaseException, so `except Exception` does not catch it), and the program dies with it.
"""

from _tokenizer import TEXT, make_tokenizer
from tokenizers import Regex
from tokenizers.normalizers import BertNormalizer, Replace

tokenizer = make_tokenizer([Replace(Regex("^"), " "), BertNormalizer()])  # prefix a space, then BERT's cleanup
print(f"encoding {TEXT!r}", flush=True)
encoding = tokenizer.encode(TEXT)  # Rust panic -> pyo3_runtime.PanicException
print(encoding.tokens)
