"""Generate the cross-language test vectors in tests/vectors/*.json.

Usage::

    .venv/bin/python tests/vectors/generate.py           # rewrite the files
    .venv/bin/python tests/vectors/generate.py --check   # exit 1 if the files are stale

Deterministic: keys come from fixed seeds, every receipt field is fixed and Ed25519 (RFC 8032)
signatures are deterministic, so the output is byte-identical on every run. The receipts,
Merkle proofs, checkpoints and bundles are built with the project's Python implementation
(proxy.receipts: model.seal, merkle, checkpoint, bundle); each vector states the verdict every
verifier must reach — by construction, not by running a verifier — and the checks that fail.

A vector is::

    {"id": "receipt/mutate/actor/changed", "kind": "receipt" | "chain" | "bundle" | "consistency",
     "description": "...", "document": <the JSON value to verify>,
     "keys": <trusted keys: a GET /v1/keys document> | null (bundle: use its own public_keys),
     "expected": {"valid": false, "failed_checks": ["signature"]}}

Check names are those of proxy/receipts/verify.py, checkpoint.py, proofs.py and bundle.py,
plus ``keys`` (the trusted key document itself is malformed). Files: receipts.json (single
receipts: valid ones, every single-field mutation, signature edge cases, wrong keys),
chains.json (ordered runs: swapped order, gaps, forks, broken links) and bundles.json (offline
bundles: valid ones over several tree shapes, flipped/swapped/missing proof hashes, wrong keys,
tampered checkpoints) and consistency.json (documents ``{"first_checkpoint", "second_checkpoint",
"proof"}``: RFC 9162 consistency proofs between a saved and a current checkpoint — valid growth,
a rewritten log, truncation, first > second, bad hashes).
"""

from __future__ import annotations

import argparse
import base64
import copy
import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nacl.bindings  # noqa: E402

from proxy.primitives import merkle  # noqa: E402
from proxy.primitives.base64url import b64url_decode, b64url_encode  # noqa: E402
from proxy.receipts.bundle import make_bundle  # noqa: E402
from proxy.receipts.proofs import consistency_proof_doc  # noqa: E402
from proxy.receipts.receipt import GENESIS_PREV_HASH, entry_hash, seal  # noqa: E402
from proxy.receipts.signing import Signer, key_id_for, public_key_entry  # noqa: E402
from proxy.tlog.checkpoint import format_checkpoint, key_hash, sign_checkpoint  # noqa: E402

OUT = Path(__file__).resolve().parent
FORMAT = "sonate-test-vectors/1"
ORIGIN = "sonate-trust-proxy/ledger"
CREATED = "2026-01-01T00:00:00.000Z"
L = 2**252 + 27742317777372353535851937790883648493  # Ed25519 group order (RFC 8032 §5.1)
TORSION_8 = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")  # a point of order 8
IDENTITY = bytes([1]) + bytes(31)  # the neutral point's encoding (small order)


def _seed(label: str) -> bytes:
    return hashlib.sha256(f"sonate test vectors: {label}".encode()).digest()


KEY_A = Signer(_seed("key A"), created=CREATED)
KEY_B = Signer(_seed("key B (after rotation)"), created="2026-02-01T00:00:00.000Z")
KEY_C = Signer(_seed("key C (not trusted)"), created=CREATED)
TRUSTED = {"keys": [public_key_entry(KEY_A), public_key_entry(KEY_B)]}
ONLY_C = {"keys": [public_key_entry(KEY_C)]}
ROTATION = "2026-03-01T12:00:05.500Z"
"""When key B replaced key A (overlap 0), with the ledger at size 6: the keyring's record of it."""
WINDOWED = {"keys": [
    {**public_key_entry(KEY_A), "not_before": CREATED, "not_after": ROTATION, "not_before_height": 0,
     "status": "retired"},
    {**public_key_entry(KEY_B), "not_before": ROTATION, "not_after": None, "not_before_height": 6,
     "status": "active"},
]}


def _hash_ref(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def expect(*checks: str) -> dict[str, Any]:
    """The expected verdict: valid iff no check fails; ``failed_checks`` sorted and unique."""
    return {"valid": not checks, "failed_checks": sorted(set(checks))}


def body(i: int, **overrides: Any) -> dict[str, Any]:
    """The unsealed receipt number ``i`` (fixed ids and times; evidence exercises JCS)."""
    receipt = {
        "v": 1,
        "receipt_id": "rcpt_" + hashlib.sha256(f"receipt {i}".encode()).hexdigest()[:32],
        "request_id": f"req_{i:04d}",
        "ts": f"2026-03-01T12:00:{i % 60:02d}.{(7 * i) % 1000:03d}Z",
        "actor": "alice",
        "intent": "general",
        "inputs_hash": _hash_ref(f"request {i}"),
        "outputs_hash": _hash_ref(f"response {i}"),
        "policy_id": "default",
        "guardrail_action": "allow" if i % 3 else "redact",
        "evidence": {"scores": {"toxicity": "0.0132", "pii": f"0.{i:04d}"}, "detectors": ["safety", "pii"],
                     "latency_ms": 12 + i, "notes": None},
        "model": "gpt-4o-mini",
        "provider": "openai",
        "stratum": {"domain": "general", "complexity": "low"},
    }
    receipt.update(overrides)
    return receipt


def build_chain(n: int = 8) -> list[dict[str, Any]]:
    """Receipts at heights 0..n-1; key A signs heights below 6, key B (rotated in) the rest."""
    chain: list[dict[str, Any]] = []
    prev = GENESIS_PREV_HASH
    for i in range(n):
        signer = KEY_A if i < 6 else KEY_B
        receipt = seal(body(i), ledger_height=i, prev_hash=prev, signer=signer)
        chain.append(receipt)
        prev = entry_hash(receipt)
    return chain


def flip_b64url_bit(text: str, byte: int = 0, bit: int = 0) -> str:
    data = bytearray(b64url_decode(text))
    data[byte] ^= 1 << bit
    return b64url_encode(bytes(data))


def flip_b64_bit(text: str, byte: int = 0, bit: int = 0) -> str:
    data = bytearray(base64.b64decode(text))
    data[byte] ^= 1 << bit
    return base64.b64encode(bytes(data)).decode()


def _clamped_scalar(seed: bytes) -> int:
    digest = bytearray(hashlib.sha512(seed).digest()[:32])
    digest[0] &= 248
    digest[31] &= 127
    digest[31] |= 64
    return int.from_bytes(digest, "little")


def torsioned_signature(signer: Signer, message: bytes) -> str:
    """An Ed25519 signature whose R has an order-8 component (R = rB + T, S = r + k·a).

    Cofactored verification ([8]SB = [8]R + [8]kA) accepts it; the cofactorless equation of
    libsodium and BoringSSL (SB = R + kA, RFC 8032 §5.1.7) rejects it.
    """
    r = int.from_bytes(hashlib.sha512(b"torsion nonce" + message).digest(), "little") % L
    big_r = nacl.bindings.crypto_core_ed25519_add(
        nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(r.to_bytes(32, "little")), TORSION_8)
    k = int.from_bytes(hashlib.sha512(big_r + signer.public_key + message).digest(), "little") % L
    s = (r + k * _clamped_scalar(signer.seed)) % L
    return b64url_encode(big_r + s.to_bytes(32, "little"))


def resign(receipt: dict[str, Any], signature: Callable[[bytes], str]) -> dict[str, Any]:
    from proxy.receipts.receipt import signing_payload

    out = dict(receipt)
    out["ed25519_sig"] = signature(signing_payload(out))
    return out


def vector(vid: str, kind: str, description: str, document: Any, keys: Any, expected: dict[str, Any]) -> dict[str, Any]:
    return {"id": vid, "kind": kind, "description": description, "document": document, "keys": keys,
            "expected": expected}


# -- single receipts ----------------------------------------------------------------------------------


def _valid_receipt_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Valid receipts: chain members, a rotated key, and content edge cases (Unicode, nulls, big integers)."""
    r0, r5, r7 = chain[0], chain[5], chain[7]
    out = [
        vector("receipt/valid/genesis", "receipt", "height 0, genesis prev_hash", r0, TRUSTED, expect()),
        vector("receipt/valid/height-5", "receipt", "a receipt in the middle of the chain", r5, TRUSTED, expect()),
        vector("receipt/valid/rotated-key", "receipt", "signed by key B after rotation; both keys published",
               r7, TRUSTED, expect()),
    ]
    specials = {
        "unicode": body(20, actor="zoë 👩‍💻", evidence={
            "\ue000": "private-use key sorts after the emoji in UTF-16 order", "😀": "astral key",
            "é": "é", "control": "tab\tnewline\nquote\"backslash\\ \u0001 \u001f \u007f \u2028",
            "nested": [{"b": 1, "a": [True, False, None, ""]}], "": "empty key"}),
        "nulls": body(21, intent=None, policy_id=None, model=None, provider=None, evidence={}, stratum={}),
        "max-safe-integer": body(22, evidence={"big": 2**53 - 1, "negative": -(2**53 - 1), "zero": 0}),
        "leap-day": body(23, ts="2024-02-29T23:59:59.999Z"),
    }
    for name, unsealed in specials.items():
        sealed = seal(unsealed, ledger_height=9, prev_hash=_hash_ref("receipt 8"), signer=KEY_A)
        out.append(vector(f"receipt/valid/{name}", "receipt", f"valid receipt ({name} content)", sealed,
                          TRUSTED, expect()))
    return out


def _changed_values(r5: dict[str, Any]) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Per field: another well-formed value and the checks that must fail when it replaces r5's."""
    return {
        "v": (2, ("schema", "signature")),
        "receipt_id": ("rcpt_" + "f" * 32, ("signature",)),
        "request_id": ("req_9999", ("signature",)),
        "ts": ("2026-03-01T12:00:05.036Z", ("signature",)),
        "actor": ("mallory", ("signature",)),
        "intent": (None, ("signature",)),
        "inputs_hash": (_hash_ref("another request"), ("signature",)),
        "outputs_hash": (_hash_ref("another response"), ("signature",)),
        "policy_id": ("permissive", ("signature",)),
        "guardrail_action": ("block", ("signature",)),
        "evidence": ({**r5["evidence"], "scores": {"toxicity": "0.9132", "pii": "0.0005"}}, ("signature",)),
        "model": ("gpt-4o", ("signature",)),
        "provider": (None, ("signature",)),
        "stratum": ({"domain": "medical", "complexity": "low"}, ("signature",)),
        "key_id": (KEY_C.key_id, ("unknown_key",)),
        "ledger_height": (6, ("signature",)),
        "prev_hash": (_hash_ref("a forged predecessor"), ("signature",)),
        "ed25519_sig": (flip_b64url_bit(r5["ed25519_sig"], 5, 3), ("signature",)),
    }


def _wrong_values(r5: dict[str, Any]) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Per field: a value of the wrong type or format and the checks that must fail."""
    return {
        "v": ("1", ("schema", "signature")),
        "receipt_id": ("rcpt_" + "F" * 32, ("schema", "signature")),
        "request_id": ("", ("schema", "signature")),
        "ts": ("2026-03-01 12:00:05", ("schema", "signature")),
        "actor": (42, ("schema", "signature")),
        "intent": (7, ("schema", "signature")),
        "inputs_hash": ("SHA256:" + "A" * 64, ("schema", "signature")),
        "outputs_hash": ("sha256:" + "0" * 63, ("schema", "signature")),
        "policy_id": (["default"], ("schema", "signature")),
        "guardrail_action": (None, ("schema", "signature")),
        "evidence": ([], ("schema", "signature")),
        "model": ({}, ("schema", "signature")),
        "provider": (True, ("schema", "signature")),
        "stratum": ("general", ("schema", "signature")),
        "key_id": ("ed25519:" + "Z" * 16, ("schema", "unknown_key")),
        "ledger_height": ("5", ("schema", "signature")),
        "prev_hash": ("sha256:short", ("schema", "signature")),
        "ed25519_sig": (r5["ed25519_sig"] + "==", ("schema", "signature")),
    }


def _field_mutation_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every field of a sealed receipt changed to another well-formed value, given a wrong type, and removed."""
    r5 = chain[5]
    changed, wrong = _changed_values(r5), _wrong_values(r5)
    out: list[dict[str, Any]] = []
    for field in r5:
        value, checks = changed[field]
        out.append(vector(f"receipt/mutate/{field}/changed", "receipt",
                          f"{field} replaced by another well-formed value after signing",
                          {**r5, field: value}, TRUSTED, expect(*checks)))
        value, checks = wrong[field]
        out.append(vector(f"receipt/mutate/{field}/wrong-type", "receipt",
                          f"{field} given a value of the wrong type or format",
                          {**r5, field: value}, TRUSTED, expect(*checks)))
        removed = {k: v for k, v in r5.items() if k != field}
        out.append(vector(f"receipt/mutate/{field}/removed", "receipt", f"{field} removed",
                          removed, TRUSTED, expect("schema", "unknown_key" if field == "key_id" else "signature")))
    return out


def _document_mutation_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole-document edits: extra fields, reordering, floats, unsafe integers, dates, genesis rules."""
    r0, r5 = chain[0], chain[5]
    return [
        vector("receipt/mutate/extra-field", "receipt", "an unexpected field added",
               {**r5, "note": "added later"}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/reordered-fields", "receipt",
               "fields in another order: canonical JSON makes the signature still verify",
               dict(reversed(list(r5.items()))), TRUSTED, expect()),
        vector("receipt/mutate/float-in-evidence", "receipt", "a float added inside evidence",
               {**r5, "evidence": {**r5["evidence"], "score": 0.5}}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/v-as-float", "receipt",
               "v written 1.0: canonical JSON is unchanged so the signature verifies, but floats are banned",
               {**r5, "v": 1.0}, TRUSTED, expect("schema")),
        vector("receipt/mutate/ledger_height-as-float", "receipt",
               "ledger_height written 5.0: signature verifies, schema rejects the float",
               {**r5, "ledger_height": 5.0}, TRUSTED, expect("schema")),
        vector("receipt/mutate/unsafe-integer", "receipt", "an integer beyond 2^53-1 inside evidence",
               {**r5, "evidence": {**r5["evidence"], "latency_ms": 2**53 + 1}}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/ledger_height-negative", "receipt", "ledger_height -1",
               {**r5, "ledger_height": -1}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/ledger_height-unsafe", "receipt", "ledger_height 2^53",
               {**r5, "ledger_height": 2**53}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/ts-impossible-date", "receipt", "ts on 30 February",
               {**r5, "ts": "2026-02-30T12:00:05.035Z"}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/ts-second-60", "receipt", "ts with second 60",
               {**r5, "ts": "2026-03-01T12:00:60.035Z"}, TRUSTED, expect("schema", "signature")),
        vector("receipt/mutate/actor-lone-surrogate", "receipt",
               "actor holds a lone UTF-16 surrogate: canonical JSON (RFC 8785) cannot encode it",
               {**r5, "actor": "\ud800"}, TRUSTED, expect("signature")),
        vector("receipt/mutate/genesis/height-0-moved", "receipt", "the genesis receipt claims height 1",
               {**r0, "ledger_height": 1}, TRUSTED, expect("genesis", "signature")),
        vector("receipt/mutate/genesis/prev-not-zero", "receipt", "the genesis receipt gets a non-zero prev_hash",
               {**r0, "prev_hash": _hash_ref("something before genesis")}, TRUSTED, expect("genesis", "signature")),
        vector("receipt/mutate/genesis/zero-prev-above-0", "receipt", "height 5 claims the genesis prev_hash",
               {**r5, "prev_hash": GENESIS_PREV_HASH}, TRUSTED, expect("genesis", "signature")),
        vector("receipt/mutate/genesis/resealed-at-1", "receipt",
               "correctly signed receipt at height 1 with the genesis prev_hash",
               seal(body(30), ledger_height=1, prev_hash=GENESIS_PREV_HASH, signer=KEY_A), TRUSTED, expect("genesis")),
    ]


def _signature_and_key_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Forged, malleated and small-order signatures; untrusted, mismatched and malformed keys."""
    r5, other_sig = chain[5], chain[4]["ed25519_sig"]
    return [
        vector("receipt/signature/other-receipt", "receipt", "the signature of another receipt",
               {**r5, "ed25519_sig": other_sig}, TRUSTED, expect("signature")),
        vector("receipt/signature/key-b-for-key-a", "receipt",
               "key_id switched to the other trusted key: the signature does not verify with it",
               {**r5, "key_id": KEY_B.key_id}, TRUSTED, expect("signature")),
        vector("receipt/signature/malleated-s-plus-l", "receipt",
               "S replaced by S + L (same value mod L): RFC 8032 §5.1.7 requires S < L",
               {**r5, "ed25519_sig": _malleate(r5["ed25519_sig"])}, TRUSTED, expect("signature")),
        vector("receipt/signature/torsioned-r", "receipt",
               "R carries an order-8 component: cofactored verification accepts, libsodium/BoringSSL reject",
               resign(r5, lambda payload: torsioned_signature(KEY_A, payload)), TRUSTED, expect("signature")),
        vector("receipt/signature/all-zero", "receipt", "a signature of 64 zero bytes",
               {**r5, "ed25519_sig": b64url_encode(bytes(64))}, TRUSTED, expect("signature")),
        vector("receipt/keys/wrong-key", "receipt", "the trusted keys do not include the signing key",
               r5, ONLY_C, expect("unknown_key")),
        vector("receipt/keys/signed-by-untrusted", "receipt", "resealed by an untrusted key (C)",
               seal(body(5), ledger_height=5, prev_hash=r5["prev_hash"], signer=KEY_C), TRUSTED, expect("unknown_key")),
        vector("receipt/keys/key-id-mismatch", "receipt",
               "the key document pairs key A's key_id with key C's public key",
               r5, {"keys": [{**public_key_entry(KEY_C), "key_id": KEY_A.key_id}]}, expect("keys")),
        vector("receipt/keys/padded-public-key", "receipt", "the key document's public_key has base64 padding",
               r5, {"keys": [{**public_key_entry(KEY_A), "public_key": public_key_entry(KEY_A)["public_key"] + "="}]},
               expect("keys")),
        vector("receipt/keys/small-order-key", "receipt",
               "a small-order public key with a signature (R = identity, S = 0) that the bare equation accepts",
               _small_order_receipt(r5), {"keys": [{"key_id": key_id_for(IDENTITY), "alg": "Ed25519",
                                                    "public_key": b64url_encode(IDENTITY), "created": CREATED}]},
               expect("signature")),
    ]


def receipt_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every receipt vector, in file order.

    Valid receipts, per-field mutations, document edits, signatures and keys,
    then strict-schema cases.
    """
    r5 = chain[5]
    out = _valid_receipt_vectors(chain) + _field_mutation_vectors(chain)
    out += _document_mutation_vectors(chain) + _signature_and_key_vectors(chain)
    # Schema leniencies of Python's re.match + "$" and Unicode \d (see tests/unit/receipts/test_vectors.py).
    out += [
        vector("receipt/strict/ts-trailing-newline", "receipt", "ts followed by a newline",
               {**r5, "ts": r5["ts"] + "\n"}, TRUSTED, expect("schema", "signature")),
        vector("receipt/strict/ts-unicode-digits", "receipt", "ts year in Arabic-Indic digits",
               {**r5, "ts": "\u0662\u0660\u0662\u0666" + r5["ts"][4:]}, TRUSTED, expect("schema", "signature")),
        vector("receipt/strict/hash-trailing-newline", "receipt", "inputs_hash followed by a newline",
               {**r5, "inputs_hash": r5["inputs_hash"] + "\n"}, TRUSTED, expect("schema", "signature")),
    ]
    return out


def _malleate(signature: str) -> str:
    raw = b64url_decode(signature)
    s = int.from_bytes(raw[32:], "little") + L
    return b64url_encode(raw[:32] + s.to_bytes(32, "little"))


def _small_order_receipt(receipt: dict[str, Any]) -> dict[str, Any]:
    forged = {**receipt, "key_id": key_id_for(IDENTITY)}
    forged["ed25519_sig"] = b64url_encode(IDENTITY + bytes(32))
    return forged


# -- chains -----------------------------------------------------------------------------------------


def chain_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = chain
    fork = seal(body(101), ledger_height=1, prev_hash=entry_hash(r[0]), signer=KEY_A)
    broken = seal(body(1), ledger_height=1, prev_hash=_hash_ref("not the genesis receipt"), signer=KEY_A)
    tampered = {**r[1], "actor": "mallory"}
    return [
        vector("chain/valid/full", "chain", "heights 0..7, key rotation at height 6", r, TRUSTED, expect()),
        vector("chain/valid/run-3-6", "chain", "a run that starts mid-chain", r[3:7], TRUSTED, expect()),
        vector("chain/swapped/first-two", "chain", "heights 1 and 0 in swapped order", [r[1], r[0]], TRUSTED,
               expect("height")),
        vector("chain/swapped/middle", "chain", "heights 0, 2, 1, 3", [r[0], r[2], r[1], r[3]], TRUSTED,
               expect("height")),
        vector("chain/gap", "chain", "height 1 missing", [r[0], r[2], r[3]], TRUSTED, expect("height")),
        vector("chain/fork", "chain", "two validly signed receipts at height 1", [r[0], r[1], fork], TRUSTED,
               expect("duplicate")),
        vector("chain/duplicate", "chain", "the same receipt twice", [r[0], r[1], r[1]], TRUSTED,
               expect("duplicate")),
        vector("chain/broken-link", "chain", "height 1 validly signed but linked to the wrong predecessor",
               [r[0], broken], TRUSTED, expect("prev_hash")),
        vector("chain/tampered-middle", "chain", "height 1 altered: its signature and the next link break",
               [r[0], tampered, r[2]], TRUSTED, expect("signature", "prev_hash")),
        vector("chain/wrong-key", "chain", "heights 6..7 signed by key B, which is not trusted",
               r[5:8], {"keys": [public_key_entry(KEY_A)]}, expect("unknown_key")),
    ]


# -- bundles ----------------------------------------------------------------------------------------


class Log:
    """The Merkle tree over the chain, with checkpoints and inclusion paths at any size."""

    def __init__(self, chain: list[dict[str, Any]]) -> None:
        self.chain = chain
        self.leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in chain]
        self.nodes, _ = merkle.extend(0, [], self.leaves)

    def root(self, size: int) -> bytes:
        return merkle.root_of_leaves(self.leaves[:size])

    def path(self, index: int, size: int) -> list[bytes]:
        return merkle.hashes_for_ranges(merkle.inclusion_ranges(index, size), self.nodes)

    def checkpoint(self, size: int, signer: Signer = KEY_A, origin: str = ORIGIN) -> str:
        return sign_checkpoint(format_checkpoint(origin, size, self.root(size)), signer)

    def consistency(self, first: int, second: int) -> dict[str, Any]:
        """The proof document of GET /v1/ledger/proof/consistency?from=first&to=second (RFC 9162 §2.1.4.1)."""
        hashes = merkle.hashes_for_ranges(merkle.consistency_ranges(first, second), self.nodes)
        return consistency_proof_doc(first, second, hashes)

    def bundle(self, index: int, size: int, signer: Signer = KEY_A, keys: Any = TRUSTED) -> dict[str, Any]:
        return make_bundle(self.chain[index], size, self.path(index, size), self.checkpoint(size, signer),
                           keys["keys"])


def _note_signature_line(body_text: str, signer: Signer, name: str) -> str:
    signature = b64url_decode(signer.sign(body_text.encode()))
    return f"\u2014 {name} {base64.b64encode(key_hash(name, signer.public_key) + signature).decode()}\n"


_BundleCase = tuple[str, str, Any, Any, tuple[str, ...]]
"""(name, description, bundle document, trusted keys or None, checks that must fail)."""


def _valid_bundle_vectors(log: Log) -> list[dict[str, Any]]:
    """Valid bundles: several leaves and tree sizes, the bundle's own keys, a rotated key."""
    out = []
    for index, size in [(0, 1), (0, 8), (3, 8), (7, 8), (4, 5), (2, 7), (6, 7)]:
        out.append(vector(f"bundle/valid/leaf-{index}-of-{size}", "bundle",
                          f"receipt at height {index} in a tree of {size}, checked against published keys",
                          log.bundle(index, size), TRUSTED, expect()))
    out.append(vector("bundle/valid/own-keys", "bundle", "no keys given: the bundle's own public_keys are used",
                      log.bundle(3, 8), None, expect()))
    rotated = log.bundle(6, 8, signer=KEY_B)
    out.append(vector("bundle/valid/rotated-key", "bundle", "receipt and checkpoint signed by the rotated key B",
                      rotated, TRUSTED, expect()))
    return out


def _with_proof(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``changes`` applied to its inclusion proof."""
    b = copy.deepcopy(base)
    b["inclusion_proof"].update(changes)
    return b


def _tamper(base: dict[str, Any], fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A deep copy of ``base`` edited in place by ``fn``."""
    b = copy.deepcopy(base)
    fn(b)
    return b


def _proof_and_receipt_cases(chain: list[dict[str, Any]], log: Log, base: dict[str, Any]) -> list[_BundleCase]:
    """Broken inclusion proofs, and receipts swapped, tampered, resealed or malformed inside the bundle."""
    hashes = base["inclusion_proof"]["hashes"]
    with_proof = functools.partial(_with_proof, base)
    tamper = functools.partial(_tamper, base)
    return [
        ("proof/flipped-hash", "one bit flipped in the second proof hash",
         with_proof(hashes=[hashes[0], flip_b64_bit(hashes[1], 7, 2), hashes[2]]), TRUSTED, ("inclusion",)),
        ("proof/swapped-hashes", "the first two proof hashes in swapped order",
         with_proof(hashes=[hashes[1], hashes[0], hashes[2]]), TRUSTED, ("inclusion",)),
        ("proof/missing-hash", "the last proof hash dropped", with_proof(hashes=hashes[:-1]), TRUSTED, ("inclusion",)),
        ("proof/extra-hash", "a proof hash appended", with_proof(hashes=hashes + [hashes[0]]), TRUSTED, ("inclusion",)),
        ("proof/empty", "no proof hashes", with_proof(hashes=[]), TRUSTED, ("inclusion",)),
        ("proof/not-base64", "a proof hash that is not canonical base64",
         with_proof(hashes=[hashes[0].rstrip("="), hashes[1], hashes[2]]), TRUSTED, ("inclusion",)),
        ("proof/wrong-leaf-index", "leaf_index 4 for the receipt at height 3", with_proof(leaf_index=4),
         TRUSTED, ("inclusion",)),
        ("proof/leaf-index-out-of-tree", "leaf_index equal to tree_size", with_proof(leaf_index=8),
         TRUSTED, ("inclusion",)),
        ("proof/tree-size-mismatch", "proof claims tree size 7, the checkpoint says 8", with_proof(tree_size=7),
         TRUSTED, ("inclusion",)),
        ("proof/leaf-index-string", "leaf_index as a string", with_proof(leaf_index="3"), TRUSTED, ("inclusion",)),
        ("proof/unknown-field", "an unknown leaf_hash field in the proof",
         with_proof(leaf_hash=base64.b64encode(log.leaves[3]).decode()), TRUSTED, ("inclusion",)),
        ("proof/not-an-object", "inclusion_proof is a list", tamper(lambda b: b.update(inclusion_proof=hashes)),
         TRUSTED, ("inclusion",)),
        ("receipt/swapped", "the receipt at height 4 put in the bundle of height 3",
         tamper(lambda b: b.update(receipt=chain[4])), TRUSTED, ("inclusion",)),
        ("receipt/tampered", "the receipt's actor changed",
         tamper(lambda b: b["receipt"].update(actor="mallory")), TRUSTED, ("signature", "inclusion")),
        ("receipt/resealed", "the receipt re-signed by key A with other content: signature fine, not in the log",
         tamper(lambda b: b.update(receipt=seal(body(3, actor="mallory"), ledger_height=3,
                                                prev_hash=chain[3]["prev_hash"], signer=KEY_A))),
         TRUSTED, ("inclusion",)),
        ("receipt/schema", "the receipt loses its model field",
         tamper(lambda b: b["receipt"].pop("model")), TRUSTED, ("schema", "signature", "inclusion")),
    ]


def _checkpoint_edits(log: Log, base: dict[str, Any]) -> dict[str, str]:
    """The bundle's checkpoint note edited: cosigned, misnamed, resized, re-rooted, signature bit flipped."""
    body_text = base["checkpoint"].split("\n\n")[0] + "\n"
    cosigned = base["checkpoint"] + _note_signature_line(body_text, KEY_C, "witness.example/w1")
    misnamed = body_text + "\n" + _note_signature_line(body_text, KEY_A, "another-name")
    resized = base["checkpoint"].replace("\n8\n", "\n7\n", 1)
    reroot = base["checkpoint"].replace(body_text.split("\n")[2], base64.b64encode(log.root(7)).decode(), 1)
    sig_line = base["checkpoint"].split("\n\n")[1]
    blob = sig_line.rsplit(" ", 1)[1].strip()
    flipped_sig = base["checkpoint"].replace(blob, flip_b64_bit(blob, 40, 0))
    return {"cosigned": cosigned, "misnamed": misnamed, "resized": resized,
            "reroot": reroot, "flipped_sig": flipped_sig}


def _key_checkpoint_and_shape_cases(log: Log, base: dict[str, Any]) -> list[_BundleCase]:
    """Wrong or malformed keys, edited or foreign checkpoints, and bundle shape errors."""
    tamper = functools.partial(_tamper, base)
    edits = _checkpoint_edits(log, base)
    cosigned, misnamed, resized = edits["cosigned"], edits["misnamed"], edits["resized"]
    reroot, flipped_sig = edits["reroot"], edits["flipped_sig"]
    return [
        ("keys/wrong-key", "the trusted keys are only key C", base, ONLY_C, ("unknown_key", "checkpoint_signature")),
        ("keys/own-keys-replaced", "no keys given and the bundle's public_keys replaced by key C",
         tamper(lambda b: b.update(public_keys=ONLY_C["keys"])), None, ("unknown_key", "checkpoint_signature")),
        ("keys/own-keys-empty", "no keys given and the bundle's public_keys empty",
         tamper(lambda b: b.update(public_keys=[])), None, ("public_keys",)),
        ("keys/own-keys-malformed", "no keys given and a bundle key entry with a bad public_key",
         tamper(lambda b: b.update(public_keys=[{**TRUSTED["keys"][0], "public_key": "not base64url!"}])), None,
         ("public_keys",)),
        ("checkpoint/wrong-signer", "checkpoint signed by key C instead of the log key",
         tamper(lambda b: b.update(checkpoint=log.checkpoint(8, KEY_C))), TRUSTED, ("checkpoint_signature",)),
        ("checkpoint/flipped-signature", "one bit flipped in the checkpoint signature",
         tamper(lambda b: b.update(checkpoint=flipped_sig)), TRUSTED, ("checkpoint_signature",)),
        ("checkpoint/resized", "checkpoint tree size edited to 7 without re-signing",
         tamper(lambda b: b.update(checkpoint=resized)), TRUSTED, ("checkpoint_signature", "inclusion")),
        ("checkpoint/other-root", "checkpoint root replaced by the size-7 root without re-signing",
         tamper(lambda b: b.update(checkpoint=reroot)), TRUSTED, ("checkpoint_signature", "inclusion")),
        ("checkpoint/other-log", "checkpoint of another origin, signed by the log key",
         tamper(lambda b: b.update(checkpoint=log.checkpoint(8, origin="other.example/log"))), TRUSTED, ()),
        ("checkpoint/misnamed-signature", "the log key's signature line names another key name",
         tamper(lambda b: b.update(checkpoint=misnamed)), TRUSTED, ("checkpoint_signature",)),
        ("checkpoint/cosigned", "an extra witness signature by an unknown key is ignored",
         tamper(lambda b: b.update(checkpoint=cosigned)), TRUSTED, ()),
        ("checkpoint/no-blank-line", "the signature block is not separated by a blank line",
         tamper(lambda b: b.update(checkpoint=base["checkpoint"].replace("\n\n", "\n"))), TRUSTED, ("checkpoint",)),
        ("checkpoint/not-text", "checkpoint is a number", tamper(lambda b: b.update(checkpoint=8)), TRUSTED,
         ("checkpoint",)),
        ("checkpoint/bad-size", "checkpoint tree size with a leading zero",
         tamper(lambda b: b.update(checkpoint=base["checkpoint"].replace("\n8\n", "\n08\n", 1))), TRUSTED,
         ("checkpoint",)),
        ("shape/version-2", "bundle_version 2", tamper(lambda b: b.update(bundle_version=2)), TRUSTED, ("bundle",)),
        ("shape/missing-checkpoint", "no checkpoint field", tamper(lambda b: b.pop("checkpoint")), TRUSTED,
         ("bundle",)),
        ("shape/unknown-field", "an unknown top-level field", tamper(lambda b: b.update(note="hi")), TRUSTED,
         ("bundle",)),
    ]


def bundle_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every bundle vector, in file order: valid bundles, then each broken case of the base bundle (leaf 3 of 8)."""
    log = Log(chain)
    out = _valid_bundle_vectors(log)
    base = log.bundle(3, 8)
    cases = _proof_and_receipt_cases(chain, log, base) + _key_checkpoint_and_shape_cases(log, base)
    for name, description, document, keys, checks in cases:
        out.append(vector(f"bundle/{name}", "bundle", description, document, keys, expect(*checks)))
    return out


# -- key validity windows (docs/receipts.md "Keys and rotation") ---------------------------------------


def rewritten_chain(chain: list[dict[str, Any]], start: int = 3) -> list[dict[str, Any]]:
    """The rewrite after a rotation: height ``start`` edited (redact → allow), it and every later receipt
    re-signed with key B, which did not exist below height 6."""
    out = chain[:start]
    prev = entry_hash(chain[start - 1])
    for i in range(start, len(chain)):
        receipt = seal(body(i, **({"guardrail_action": "allow"} if i == start else {})), ledger_height=i,
                       prev_hash=prev, signer=KEY_B)
        out.append(receipt)
        prev = entry_hash(receipt)
    return out


def key_window_receipt_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Receipts checked against a keyring with windows: inside, at and outside each bound."""
    spooled = seal(body(30, ts="2026-03-01T12:00:04.000Z"), ledger_height=8, prev_hash=entry_hash(chain[7]),
                   signer=KEY_B)
    late_a = seal(body(7), ledger_height=7, prev_hash=chain[7]["prev_hash"], signer=KEY_A)
    at_rotation = seal(body(5, ts=ROTATION), ledger_height=5, prev_hash=chain[5]["prev_hash"], signer=KEY_A)
    bad = lambda **change: {"keys": [WINDOWED["keys"][0], {**WINDOWED["keys"][1], **change}]}  # noqa: E731
    cases = [
        ("valid/before-rotation", "key A, height 5, ts before its not_after", chain[5], WINDOWED, ()),
        ("valid/first-height-of-key-b", "key B at its not_before_height (6)", chain[6], WINDOWED, ()),
        ("valid/spooled-replay", "key B at height 8 on a receipt whose ts is before B's not_before (a spooled "
         "request sealed after the rotation): heights bound the key, not ts", spooled, WINDOWED, ()),
        ("below-not-before-height", "height 3 edited and re-signed with key B, made at height 6",
         rewritten_chain(chain)[3], WINDOWED, ("key_window",)),
        ("after-not-after", "key A signs a receipt dated after it was retired", late_a, WINDOWED, ("key_window",)),
        ("at-not-after", "key A signs a receipt dated exactly at its not_after", at_rotation, WINDOWED,
         ("key_window",)),
        ("keys/height-as-string", "not_before_height \"6\" is not an integer", chain[6], bad(not_before_height="6"),
         ("keys",)),
        ("keys/height-negative", "not_before_height -1", chain[6], bad(not_before_height=-1), ("keys",)),
        ("keys/not-after-malformed", "not_after without milliseconds", chain[6],
         bad(not_after="2026-03-02T00:00:00Z"), ("keys",)),
    ]
    return [vector(f"receipt/key-window/{name}", "receipt", description, document, keys, expect(*checks))
            for name, description, document, keys, checks in cases]


def key_window_chain_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole chain with the windowed keyring, intact and rewritten after the rotation."""
    return [
        vector("chain/key-window/valid", "chain", "heights 0..7 with the keyring's windows: rotation at height 6",
               chain, WINDOWED, expect()),
        vector("chain/key-window/rewritten-after-rotation", "chain", "height 3 edited, heights 3..7 re-signed with key B: "
               "every link and signature verifies, heights 3..5 are below B's not_before_height",
               rewritten_chain(chain), WINDOWED, expect("key_window")),
        vector("chain/key-window/rewritten-without-windows", "chain", "the same rewrite checked with keys that carry no "
               "windows verifies: the keyring's record is what catches it", rewritten_chain(chain), TRUSTED,
               expect()),
    ]


def key_window_bundle_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A bundle of the rewritten log (checkpoint re-signed by key B) with the windowed keys."""
    log = Log(rewritten_chain(chain))
    rewritten = log.bundle(3, 8, signer=KEY_B, keys=WINDOWED)
    return [
        vector("bundle/key-window/valid", "bundle", "leaf 7 of 8 signed by key B, windowed keys",
               Log(chain).bundle(7, 8, signer=KEY_B, keys=WINDOWED), WINDOWED, expect()),
        vector("bundle/key-window/rewritten", "bundle", "leaf 3 of a log rewritten after the rotation: proof and checkpoint "
               "verify, the receipt's key did not exist at height 3", rewritten, WINDOWED, expect("key_window")),
        vector("bundle/key-window/rewritten-own-keys", "bundle", "the same bundle with its own public_keys, which carry "
               "the windows", rewritten, None, expect("key_window")),
    ]


# -- consistency proofs between checkpoints (a saved checkpoint against the current one) ------------


def _consistency_doc(first_checkpoint: Any, second_checkpoint: Any, proof: Any) -> dict[str, Any]:
    return {"first_checkpoint": first_checkpoint, "second_checkpoint": second_checkpoint, "proof": proof}


def _edited_proof(proof: dict[str, Any], fn: Callable[[list[str]], Any]) -> dict[str, Any]:
    return {**proof, "hashes": fn(list(proof["hashes"]))}


def consistency_vectors(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consistency proofs (RFC 9162 §2.1.4) between two signed checkpoints of the 8-receipt log.

    Valid: every shape of (first, second) from 1 -> 2 to 8 -> 8. Broken: the rewrite (the proof of
    a log rewritten from height 3 against the honest saved root), a wrong root, truncation (the
    saved tree larger than the current one), first > second, bad hashes, sizes that do not match
    the checkpoints, another log, an untrusted signer. Checks as proofs.py verify_consistency_proof.
    """
    log, forged = Log(chain), Log(rewritten_chain(chain))
    cp, proof = log.checkpoint, log.consistency
    out = [vector(f"consistency/valid/{m}-to-{n}", "consistency", f"tree of {m} is a prefix of the tree of {n}",
                  _consistency_doc(cp(m), cp(n), proof(m, n)), TRUSTED, expect())
           for m, n in [(1, 2), (1, 8), (2, 8), (3, 7), (4, 8), (5, 8), (6, 7), (7, 8), (8, 8)]]
    out.append(vector("consistency/valid/rotated-key", "consistency",
                      "the newer checkpoint signed by the rotated key B",
                      _consistency_doc(cp(3), cp(8, signer=KEY_B), proof(3, 8)), TRUSTED, expect()))
    base = proof(3, 8)
    flipped = _edited_proof(base, lambda h: [flip_b64_bit(h[0])] + h[1:])
    cases = [
        ("rewritten", "saved checkpoint of 5; the log rewritten from height 3 and its proof 5 -> 8 from the "
         "forged tree",
         _consistency_doc(cp(5), forged.checkpoint(8), forged.consistency(5, 8)), ("consistency",)),
        ("rewritten-same-size", "saved checkpoint of 8 and a rewritten log of 8: two roots for one size",
         _consistency_doc(cp(8), forged.checkpoint(8), proof(8, 8)), ("consistency",)),
        ("wrong-second-root", "an honest proof 3 -> 8 against the rewritten log's checkpoint of 8",
         _consistency_doc(cp(3), forged.checkpoint(8), base), ("consistency",)),
        ("wrong-first-root", "an honest proof 4 -> 8 against a saved checkpoint of the rewritten log",
         _consistency_doc(forged.checkpoint(4), cp(8), proof(4, 8)), ("consistency",)),
        ("truncated", "saved checkpoint of 8, current of 5: the proof claims 5 -> 8",
         _consistency_doc(cp(8), cp(5), proof(5, 8)), ("consistency",)),
        ("first-greater-than-second", "first 8 > second 5, checkpoints in that order",
         _consistency_doc(cp(8), cp(5), {"first": 8, "second": 5, "hashes": []}), ("consistency",)),
        ("sizes-not-the-checkpoints", "a valid proof 3 -> 8 with checkpoints of 4 and 8",
         _consistency_doc(cp(4), cp(8), base), ("consistency",)),
        ("hashes/flipped-bit", "one bit of the first proof hash flipped", _consistency_doc(cp(3), cp(8), flipped),
         ("consistency",)),
        ("hashes/swapped", "the first two proof hashes swapped",
         _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: [h[1], h[0]] + h[2:])), ("consistency",)),
        ("hashes/missing-last", "the last proof hash dropped",
         _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: h[:-1])), ("consistency",)),
        ("hashes/extra", "one hash too many",
         _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: h + [h[0]])), ("consistency",)),
        ("hashes/empty", "no hashes for 3 -> 8", _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: [])),
         ("consistency",)),
        ("hashes/equal-sizes-with-hash", "8 -> 8 with one hash",
         _consistency_doc(cp(8), cp(8), {"first": 8, "second": 8, "hashes": base["hashes"][:1]}), ("consistency",)),
        ("hashes/not-base64", "a hash that is not base64",
         _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: ["!" * 43 + "="] + h[1:])), ("consistency",)),
        ("hashes/short", "a 31-byte hash",
         _consistency_doc(cp(3), cp(8), _edited_proof(base, lambda h: [base64.b64encode(bytes(31)).decode()] + h[1:])),
         ("consistency",)),
        ("hashes/not-a-list", "hashes is a string",
         _consistency_doc(cp(3), cp(8), {**base, "hashes": base["hashes"][0]}), ("consistency",)),
        ("proof/size-as-string", "first is \"3\"", _consistency_doc(cp(3), cp(8), {**base, "first": "3"}),
         ("consistency",)),
        ("proof/not-an-object", "the proof is a list", _consistency_doc(cp(3), cp(8), [3, 8]), ("consistency",)),
        ("other-log", "the newer checkpoint names another origin",
         _consistency_doc(cp(3), log.checkpoint(8, origin="example.com/other-log"), base), ("consistency",)),
        ("untrusted-signer", "the newer checkpoint signed by key C, which is not trusted",
         _consistency_doc(cp(3), cp(8, signer=KEY_C), base), ("checkpoint_signature",)),
        ("malformed-checkpoint", "the saved checkpoint's size line is not a number",
         _consistency_doc(cp(3).replace("\n3\n", "\nthree\n", 1), cp(8), base), ("checkpoint",)),
    ]
    for name, description, document, checks in cases:
        out.append(vector(f"consistency/{name}", "consistency", description, document, TRUSTED, expect(*checks)))
    return out


def build() -> dict[str, dict[str, Any]]:
    """Every vector file's content, keyed by file name."""
    chain = build_chain()

    def doc(description: str, vectors: list[dict[str, Any]]) -> dict[str, Any]:
        return {"format": FORMAT, "generator": "tests/vectors/generate.py", "description": description,
                "vectors": vectors}

    return {
        "receipts.json": doc("Single trust receipts: valid ones, every single-field mutation, signature edge "
                             "cases, wrong keys and key validity windows.",
                             receipt_vectors(chain) + key_window_receipt_vectors(chain)),
        "chains.json": doc("Ordered runs of receipts: swapped order, gaps, forks, broken links, a rewrite after a "
                           "key rotation.", chain_vectors(chain) + key_window_chain_vectors(chain)),
        "bundles.json": doc("Offline bundles (receipt + RFC 9162 inclusion proof + C2SP checkpoint): valid ones "
                            "and tampered variants.", bundle_vectors(chain) + key_window_bundle_vectors(chain)),
        "consistency.json": doc("RFC 9162 consistency proofs between two signed checkpoints ({first_checkpoint, "
                                "second_checkpoint, proof}): valid growth, a rewritten log, truncation, bad hashes.",
                                consistency_vectors(chain)),
    }


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from what would be written")
    args = parser.parse_args(argv)
    stale = []
    total = 0
    for name, content in build().items():
        text = render(content)
        total += len(content["vectors"])
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
        print(f"{name}: {len(content['vectors'])} vectors")
    print(f"total: {total} vectors")
    if stale:
        print(f"stale: {', '.join(stale)}; run tests/vectors/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
