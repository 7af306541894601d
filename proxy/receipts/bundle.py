"""Offline receipt bundles: one JSON document that proves a receipt with no server and no other receipt.

Pure: no I/O. Format (``bundle_version`` 1; the browser verifier at ``/verify``
implements the same rules)::

    {"bundle_version": 1,
     "receipt": {...},                                  # the sealed receipt
     "inclusion_proof": {"leaf_index": H, "tree_size": N, "hashes": ["<base64>", ...]},
     "checkpoint": "<signed note text>",                # C2SP tlog-checkpoint, Ed25519 signed note
     "public_keys": [{"key_id", "alg", "public_key", "created", ...}, ...]}   # as in GET /v1/keys

Checks, in order (:func:`verify_bundle`): the document shape (``bundle``);
the key entries (``public_keys``); the receipt's schema, key, Ed25519
signature and genesis rule (see :func:`proxy.receipts.verify.verify_receipt`);
the checkpoint's format and signature (``checkpoint``, ``origin``,
``checkpoint_signature``); and the inclusion of leaf
``SHA-256(0x00 ‖ entry hash)`` at ``leaf_index == ledger_height`` in the
tree of ``tree_size ==`` the checkpoint's size, with the checkpoint's root
(``inclusion``, RFC 9162 §2.1.3.2).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from proxy.primitives.failure import Failure
from proxy.primitives.merkle import b64_encode_hash
from proxy.receipts.proofs import verify_inclusion_proof
from proxy.receipts.signing import KeyFileError, load_public_keys
from proxy.receipts.verify import verify_receipt

__all__ = ["BUNDLE_FIELDS", "BUNDLE_VERSION", "make_bundle", "verify_bundle"]

BUNDLE_VERSION = 1
BUNDLE_FIELDS = ("bundle_version", "receipt", "inclusion_proof", "checkpoint", "public_keys")
_PROOF_FIELDS = ("leaf_index", "tree_size", "hashes")


def make_bundle(receipt: dict[str, Any], tree_size: int, hashes: Sequence[bytes], checkpoint: str,
                public_keys: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Assemble a bundle for ``receipt`` (leaf ``receipt["ledger_height"]``).

    ``hashes``: the RFC 9162 inclusion path (32-byte hashes) in the tree of
    ``tree_size`` leaves that ``checkpoint`` (signed note text) commits to;
    ``public_keys``: key entries as published at ``GET /v1/keys``.
    """
    return {
        "bundle_version": BUNDLE_VERSION,
        "receipt": receipt,
        "inclusion_proof": {"leaf_index": receipt["ledger_height"], "tree_size": tree_size,
                            "hashes": [b64_encode_hash(h) for h in hashes]},
        "checkpoint": checkpoint,
        "public_keys": list(public_keys),
    }


def verify_bundle(bundle: Any, trusted_keys: Mapping[str, bytes] | None = None,
                  origin: str | None = None) -> list[Failure]:
    """Verify an offline bundle; return every failure (empty list = the receipt is proven).

    ``trusted_keys`` (``{key_id: 32-byte key}``): when given, only these keys
    may sign the receipt and the checkpoint and the bundle's own
    ``public_keys`` are not trusted; when None, the bundle's keys are used
    (the bundle is then self-consistent, and the caller should compare its
    key ids with a trusted source). ``origin``: the log expected (None:
    any). Never raises on malformed input.
    """
    where = "bundle"
    if not isinstance(bundle, dict):
        return [Failure(None, None, "bundle", "a bundle must be a JSON object", where=where)]
    fails: list[Failure] = []
    missing = [name for name in BUNDLE_FIELDS if name not in bundle]
    extra = sorted(set(bundle) - set(BUNDLE_FIELDS))
    if missing:
        fails.append(Failure(None, None, "bundle", f"missing field(s): {', '.join(missing)}", where=where))
    if extra:
        fails.append(Failure(None, None, "bundle", f"unknown field(s): {', '.join(extra)}", where=where))
    version = bundle.get("bundle_version")
    if "bundle_version" in bundle and (version != BUNDLE_VERSION or isinstance(version, bool)):
        fails.append(Failure(None, None, "bundle", f"bundle_version must be {BUNDLE_VERSION}, got {version!r}",
                             where=where))
    if missing or fails:
        return fails
    keys: Mapping[str, bytes]
    if trusted_keys is not None:
        keys = trusted_keys
    else:
        entries = bundle["public_keys"]
        try:
            if not isinstance(entries, list) or not entries:
                raise KeyFileError("public_keys must be a non-empty list of key entries")
            keys = load_public_keys(entries)
        except KeyFileError as exc:
            return [Failure(None, None, "public_keys", str(exc).replace("public keys: ", ""),
                            where="bundle public_keys")]
    receipt = bundle["receipt"]
    fails += verify_receipt(receipt, keys if isinstance(keys, dict) else dict(keys))  # keeps key windows
    proof = bundle["inclusion_proof"]
    if isinstance(proof, dict):
        unknown = sorted(set(proof) - set(_PROOF_FIELDS))
        absent = [name for name in _PROOF_FIELDS if name not in proof]
        if unknown or absent:
            detail = "; ".join(filter(None, [f"missing field(s): {', '.join(absent)}" if absent else None,
                                              f"unknown field(s): {', '.join(unknown)}" if unknown else None]))
            return fails + [Failure(None, None, "inclusion", detail, where="inclusion proof")]
    checkpoint = bundle["checkpoint"]
    if not isinstance(checkpoint, str):
        return fails + [Failure(None, None, "checkpoint", "checkpoint must be the signed note text",
                                where="checkpoint")]
    return fails + verify_inclusion_proof(proof, receipt, checkpoint, keys, origin)
