"""A run's seed from its session's base seed and its place in the plan; short digests of text.

Standard library C modules only (no ``random``, whose import costs milliseconds): the head start
(lifeguard.run.headstart) derives the seed of a command it starts before the rest of lifeguard is loaded, and
the plan (lifeguard.plan.scheduler) derives it again; both call this.
"""

from __future__ import annotations

# Imported once: a failed import is not cached, and trying _sha2 first on every call cost 0.3 ms a run on 3.11.
try:
    from _sha2 import sha256, sha512  # Python 3.12 and later
except ImportError:
    from _sha256 import sha256  # Python 3.10 and 3.11
    from _sha512 import sha512


def text_digest(text: str, length: int) -> str:
    """The first ``length`` hex digits of the text's SHA-256, as ``hashlib.sha256`` gives them, without
    ``hashlib``: its import loads OpenSSL, whose exit handler then runs in every test forked from a pytest
    process that imported it (``OPENSSL_cleanup``: about 2 ms of each forked test's exit)."""
    return str(sha256(text.encode(errors="surrogatepass")).hexdigest()[:length])  # a file name's lone surrogates too


def run_seed(base_seed: int, scenario: str, variant: str, index: int) -> int:
    """``random.Random(f"{base_seed}:{scenario}:{variant}:{index}").getrandbits(32)``: string seeding hashes the
    text with SHA-512 and seeds the generator with the text and its hash read as one integer (seed version 2),
    the same on every Python version, with no OpenSSL to load."""
    import _random

    text = f"{base_seed}:{scenario}:{variant}:{index}".encode(errors="surrogatepass")  # a file name's too
    generator = _random.Random()
    generator.seed(int.from_bytes(text + sha512(text).digest(), "big"))
    return int(generator.getrandbits(32))
