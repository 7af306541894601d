"""An escalated request's placeholder mapping, encrypted under a key only its requester holds.

The stored case keeps Privacy's placeholders (``<PERSON_1>``); the mapping back to the originals is
sealed with a fresh random key (NaCl ``SecretBox``: XSalsa20-Poly1305, authenticated) that is sent
once, to the requester, in the escalation notice's ``x-sonate-escalation-key`` header and never
stored. ``GET /v1/escalations/{id}`` opens the mapping only when the client presents that key, so an
operator reading the store, or a reviewer, sees placeholders (docs/security.md "Review").

Wire forms: the key is 32 bytes as unpadded URL-safe base64 (43 characters); the sealed mapping
is the SecretBox message (nonce + ciphertext) as standard base64, of the mapping's UTF-8 JSON.
"""

from __future__ import annotations

import base64
import binascii
import json

import nacl.exceptions
import nacl.secret
import nacl.utils

__all__ = ["KEY_HEADER", "open_mapping", "seal_mapping"]

#: The response header that carries the key with the escalation notice, and the request header
#: ``GET /v1/escalations/{id}`` reads it from.
KEY_HEADER = "x-sonate-escalation-key"


def seal_mapping(mapping: dict[str, str]) -> tuple[str, str]:
    """``(key, sealed)``: a fresh key and ``mapping`` encrypted under it (the wire forms above)."""
    key = nacl.utils.random(nacl.secret.SecretBox.KEY_SIZE)
    sealed = nacl.secret.SecretBox(key).encrypt(json.dumps(mapping, ensure_ascii=False).encode("utf-8"))
    return base64.urlsafe_b64encode(key).decode("ascii").rstrip("="), base64.b64encode(bytes(sealed)).decode("ascii")


def open_mapping(sealed: str, key: str) -> dict[str, str]:
    """The mapping ``sealed`` under ``key``; ValueError when the key is malformed or not the one
    it was sealed with (authentication fails: nothing is decrypted)."""
    try:
        raw_key = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("the escalation key is not base64") from None
    if len(raw_key) != nacl.secret.SecretBox.KEY_SIZE:
        raise ValueError("the escalation key has the wrong length")
    try:
        plain = nacl.secret.SecretBox(raw_key).decrypt(base64.b64decode(sealed))
    except nacl.exceptions.CryptoError:
        raise ValueError("the escalation key does not open this case") from None
    return json.loads(plain)
