r"""Sealing a receipt many times cheaply: validate and encode once, then chain and sign per head.

Group commit (:mod:`proxy.receipts.chain`) seals a batch on the ledger head it
expects; when another writer moved the head first, the whole batch is sealed
again on the new head. Everything that does not depend on the head (schema
and float checks, the RFC 8785 encoding of the unsealed members) is done once
by :class:`PreparedReceipt`; each :meth:`PreparedReceipt.seal` then costs one
Ed25519 signature and one SHA-256.

The bytes are exactly :func:`proxy.primitives.canonical.canonical` of the sealed
receipt: RFC 8785 §3.2.3 serialises an object as its members sorted by the
UTF-16 code units of their names, ``{name:value,...}``, so the members are
encoded once each and only the four chain members are encoded per seal.

Each member value is encoded by the standard library's C JSON encoder
(``sort_keys``, no whitespace, ``ensure_ascii=False``) when that output *is*
RFC 8785's: the value holds only str (no lone surrogate), bool, None, integers
within ±(2**53−1) and lists/dicts of them, and no object name has a character
at or above U+E000 (below it, code-point order is UTF-16 code-unit order).
String escaping is the same in both (RFC 8785 §3.2.2.2: ``\b \t \n \f \r \" \\``,
other controls ``\u00xx`` in lowercase hex, everything else literal). Any
other value goes through ``rfc8785`` (:func:`proxy.primitives.canonical.canonical`),
which is also the reference the tests compare against. Pure functions: no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.primitives.canonical import MAX_SAFE_INTEGER, assert_no_floats, canonical, sha256_ref
from proxy.receipts.receipt import CHAIN_FIELDS, schema_problems

__all__ = ["PreparedReceipt", "SealedReceipt", "encode_value"]

_HASH = re.compile(r"sha256:[0-9a-f]{64}")


class _Signer(Protocol):
    key_id: str

    def sign(self, message: bytes) -> str: ...


def _utf16_order(name: str) -> bytes:
    """RFC 8785 §3.2.3 sort key of a member name: its UTF-16 code units (big-endian bytes compare alike)."""
    return name.encode("utf-16be")


def _plain(value: Any) -> bool:
    """True if the C JSON encoder writes ``value`` exactly as RFC 8785 does (see the module docstring)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if kind is dict:
        return all(type(k) is str and (not k or max(k) < "\ue000") and _plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


_encode_str = json.encoder.encode_basestring  # the C escaper ensure_ascii=False uses
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def encode_value(value: Any) -> bytes:
    """RFC 8785 bytes of a JSON value: the C encoder when :func:`_plain`, else ``rfc8785``.

    Raises like :func:`proxy.primitives.canonical.canonical`.
    """
    if _plain(value):
        try:
            return _ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: rfc8785 names the problem
            pass
    return canonical(value)


def _encode_plain(value: Any) -> bytes:
    """:func:`encode_value` of a value already known to be :func:`_plain`."""
    kind = type(value)
    if value is None:
        return b"null"
    if kind is bool:
        return b"true" if value else b"false"
    if kind is int:
        return str(value).encode("ascii")
    try:
        if kind is str:
            return _encode_str(value).encode("utf-8")
        return _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        return canonical(value)


@functools.lru_cache(maxsize=256)
def _name(name: str) -> bytes:
    """The encoded member name followed by ``:`` (receipt field names repeat: cached)."""
    return encode_value(name) + b":"


def _member(name: str, value: Any) -> bytes:
    return _name(name) + encode_value(value)


@dataclass(frozen=True)
class SealedReceipt:
    """A receipt sealed on a head: the ``receipt`` dict, its RFC 8785 bytes ``encoded`` and
    ``entry_hash`` (``sha256:<hex>`` of ``encoded``, the next receipt's ``prev_hash``)."""

    receipt: dict[str, Any]
    encoded: bytes
    entry_hash: str


@functools.lru_cache(maxsize=64)
def _member_orders(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """RFC 8785 member orders of a receipt with body ``names``: without and with ``ed25519_sig``."""
    unsigned = sorted([*names, "key_id", "ledger_height", "prev_hash"], key=_utf16_order)
    return tuple(unsigned), tuple(sorted([*unsigned, "ed25519_sig"], key=_utf16_order))


class PreparedReceipt:
    """An unsealed receipt, checked and encoded once, ready to be sealed on any head.

    ``receipt``: a dict as :func:`proxy.receipts.receipt.new_receipt` returns
    (chain fields, if present, are dropped). Raises ``ValueError`` for a
    malformed receipt and ``TypeError`` for floats or unsafe integers, like
    :func:`proxy.receipts.receipt.seal`. Attributes: ``body`` (the unsealed
    receipt) and ``receipt_id``.
    """

    __slots__ = ("body", "receipt_id", "_members", "_unsigned_order", "_signed_order")

    def __init__(self, receipt: dict[str, Any]) -> None:
        """Validate ``receipt`` and encode its members (see the class docstring for errors)."""
        if not isinstance(receipt, dict):
            raise ValueError("a receipt must be a JSON object")
        body = {k: v for k, v in receipt.items() if k not in CHAIN_FIELDS}
        plain = _plain(body)
        if not plain:
            assert_no_floats(body)  # TypeError naming the first float or unsafe integer
        problems = schema_problems(body, sealed=False, check_floats=False)  # floats: checked just above
        if problems:
            raise ValueError("; ".join(f"{field}: {problem}" for field, problem in problems))
        self.body = body
        self.receipt_id: str = body["receipt_id"]
        encode = _encode_plain if plain else encode_value
        self._members = {name: _name(name) + encode(value) for name, value in body.items()}
        self._unsigned_order, self._signed_order = _member_orders(tuple(body))

    def seal(self, ledger_height: int, prev_hash: str, signer: _Signer) -> SealedReceipt:
        """Chain the receipt at ``ledger_height`` after ``prev_hash`` and sign it with ``signer``.

        Same result as :func:`proxy.receipts.receipt.seal` (Ed25519 over the
        canonical receipt without ``ed25519_sig``). Raises ``ValueError`` for a
        negative or non-integer height or a ``prev_hash`` that is not
        ``sha256:`` + 64 lowercase hex.
        """
        if isinstance(ledger_height, bool) or not isinstance(ledger_height, int) or ledger_height < 0:
            raise ValueError(f"ledger_height must be an integer >= 0, got {ledger_height!r}")
        if not isinstance(prev_hash, str) or not _HASH.fullmatch(prev_hash):
            raise ValueError(f"prev_hash must be sha256: + 64 lowercase hex, got {prev_hash!r}")
        chain = {"key_id": signer.key_id, "ledger_height": ledger_height, "prev_hash": prev_hash}
        members = dict(self._members)
        for name, value in chain.items():
            members[name] = _member(name, value)
        signature = signer.sign(b"{" + b",".join(members[n] for n in self._unsigned_order) + b"}")
        members["ed25519_sig"] = _member("ed25519_sig", signature)
        encoded = b"{" + b",".join(members[n] for n in self._signed_order) + b"}"
        receipt = {**self.body, **chain, "ed25519_sig": signature}
        return SealedReceipt(receipt, encoded, sha256_ref(encoded))
