"""The same tokenizer as bug.py, with the space prefixed by the Prepend normalizer.

Prepend (tokenizers 0.14 and later) is the normalizer made for adding a prefix: it keeps the
alignments of the NormalizedString consistent, so BertNormalizer after it works and the text
normalizes to the same " sample text" as bug.py intends.
"""

from _tokenizer import TEXT, make_tokenizer
from tokenizers.normalizers import BertNormalizer, Prepend

tokenizer = make_tokenizer([Prepend(" "), BertNormalizer()])
print(f"normalized: {tokenizer.normalizer.normalize_str(TEXT)!r}")
print(f"tokens: {tokenizer.encode(TEXT).tokens}")
