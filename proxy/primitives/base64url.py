"""Strict unpadded base64url (RFC 4648 §5): the encoding of keys and signatures in receipts,
key files and checkpoints."""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["b64url_decode", "b64url_encode"]

_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


def b64url_encode(data: bytes) -> str:
    """Encode bytes as base64url without padding (RFC 4648 §5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode unpadded base64url (RFC 4648 §5), strictly.

    Only the canonical encoding is accepted: characters outside
    ``[A-Za-z0-9_-]``, padding, an impossible length, or non-zero trailing
    bits raise ``ValueError``. Strictness keeps exactly one valid text per
    signature, so a receipt cannot be altered without failing verification.
    """
    if not isinstance(text, str) or not _B64URL.match(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not unpadded base64url: {exc}") from None
    if b64url_encode(data) != text:
        raise ValueError("non-canonical base64url (trailing bits set)")
    return data
