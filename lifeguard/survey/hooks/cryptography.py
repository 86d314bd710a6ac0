"""cryptography (its Rust/OpenSSL bindings): a key, a signature, a cipher context, a hash."""

from typing import Any

MODULES = ("cryptography.hazmat.primitives.asymmetric.ec",)


def hook(module: Any) -> list[Any]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key = module.generate_private_key(module.SECP256R1())
    signature = key.sign(b"lifeguard", module.ECDSA(hashes.SHA256()))
    aead = AESGCM(AESGCM.generate_key(bit_length=128))
    digest = hashes.Hash(hashes.SHA256())
    digest.update(b"lifeguard")
    return [key, signature, aead, aead.encrypt(b"\0" * 12, b"data", None), digest.finalize()]
