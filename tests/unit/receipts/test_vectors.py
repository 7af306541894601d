"""The Python verifier agrees with every cross-language test vector (tests/vectors/*.json).

Each vector states the verdict and the failing checks by construction (tests/vectors/generate.py);
the browser verifier runs the same vectors in tests/e2e/test_web_verifier.py. The consistency
vectors (consistency.json: a saved checkpoint against the current one) go through
proofs.verify_consistency_proof and, below it, the raw RFC 9162 §2.1.4.2 merkle.verify_consistency_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.primitives import merkle
from proxy.receipts.bundle import verify_bundle
from proxy.receipts.proofs import parse_hashes, verify_consistency_proof
from proxy.receipts.signing import KeyFileError, load_public_keys
from proxy.receipts.verify import verify_chain, verify_receipt
from proxy.tlog.checkpoint import CheckpointError, parse_checkpoint

VECTORS_DIR = Path(__file__).resolve().parents[2] / "vectors"
FILES = ("receipts.json", "chains.json", "bundles.json")
CONSISTENCY_FILE = "consistency.json"


def load_vectors(files: tuple[str, ...] = FILES) -> list[dict[str, Any]]:
    """Every vector of every file, in file order."""
    vectors = []
    for name in files:
        document = json.loads((VECTORS_DIR / name).read_text())
        assert document["format"] == "sonate-test-vectors/1"
        vectors += document["vectors"]
    return vectors


def python_verdict(vector: dict[str, Any]) -> dict[str, Any]:
    """``{"valid", "failed_checks"}`` of the Python verifier for one vector.

    ``keys``: a malformed trusted-key document is the ``keys`` check (load_public_keys raises).
    """
    trusted = None
    if vector["keys"] is not None:
        try:
            trusted = load_public_keys(vector["keys"])
        except KeyFileError:
            return {"valid": False, "failed_checks": ["keys"]}
    document = vector["document"]
    if vector["kind"] == "receipt":
        failures = verify_receipt(document, trusted)
    elif vector["kind"] == "chain":
        failures = verify_chain(document, trusted)
    elif vector["kind"] == "bundle":
        failures = verify_bundle(document, trusted)
    elif vector["kind"] == "consistency":
        failures = verify_consistency_proof(document["proof"], document["first_checkpoint"],
                                            document["second_checkpoint"], trusted)
    else:
        raise AssertionError(f"unknown vector kind {vector['kind']!r}")
    checks = sorted({failure.check for failure in failures})
    return {"valid": not checks, "failed_checks": checks}


VECTORS = load_vectors()
CONSISTENCY_VECTORS = load_vectors((CONSISTENCY_FILE,))


def raw_consistency(document: dict[str, Any]) -> bool | None:
    """``merkle.verify_consistency_path`` on a consistency vector's sizes, roots and hashes; None when
    a checkpoint or the hashes do not parse (no raw path to check)."""
    proof = document["proof"]
    try:
        old, new = parse_checkpoint(document["first_checkpoint"]), parse_checkpoint(document["second_checkpoint"])
        hashes = parse_hashes(proof["hashes"])
    except (CheckpointError, merkle.MerkleError, TypeError, KeyError):
        return None
    return merkle.verify_consistency_path(proof["first"], proof["second"], old.root_hash, new.root_hash, hashes)


def path_decides(document: dict[str, Any]) -> bool:
    """Whether the raw path alone decides the ``consistency`` check: everything parses, one origin, and
    the proof's sizes are the checkpoints' (otherwise proofs.py fails it before the path)."""
    if raw_consistency(document) is None:
        return False
    old, new = parse_checkpoint(document["first_checkpoint"]), parse_checkpoint(document["second_checkpoint"])
    proof = document["proof"]
    return old.origin == new.origin and (old.tree_size, new.tree_size) == (proof["first"], proof["second"])


def _param(vector: dict[str, Any]) -> Any:
    return pytest.param(vector, id=vector["id"])


@pytest.mark.parametrize("vector", [_param(v) for v in VECTORS])
def test_python_verifier_agrees_with_vector(vector: dict[str, Any]) -> None:
    assert python_verdict(vector) == vector["expected"], vector["description"]


@pytest.mark.parametrize("vector", [_param(v) for v in CONSISTENCY_VECTORS])
def test_python_consistency_agrees_with_vector(vector: dict[str, Any]) -> None:
    assert python_verdict(vector) == vector["expected"], vector["description"]
    if path_decides(vector["document"]):
        expected = "consistency" not in vector["expected"]["failed_checks"]
        assert raw_consistency(vector["document"]) is expected, vector["description"]


def test_raw_consistency_path_rejects_every_broken_proof() -> None:
    """RFC 9162 §2.1.4.2 alone (no checkpoint checks): each bad-proof, rewrite and truncation vector fails."""
    broken = [v for v in CONSISTENCY_VECTORS if "consistency" in v["expected"]["failed_checks"]]
    checked = [v["id"] for v in broken if raw_consistency(v["document"]) is not None
               and v["id"] != "consistency/other-log"]  # the only one whose path is sound
    assert all(raw_consistency(v["document"]) is False for v in broken if v["id"] in checked)
    for required in ("consistency/rewritten", "consistency/truncated", "consistency/first-greater-than-second",
                     "consistency/wrong-second-root", "consistency/hashes/flipped-bit"):
        assert required in checked
    valid = [v for v in CONSISTENCY_VECTORS if v["expected"]["valid"]]
    assert len(valid) >= 10 and all(raw_consistency(v["document"]) is True for v in valid)


def test_vector_set_covers_the_brief() -> None:
    ids = {v["id"] for v in VECTORS}
    assert len(ids) == len(VECTORS), "vector ids must be unique"
    fields = ("v", "receipt_id", "request_id", "ts", "actor", "intent", "inputs_hash", "outputs_hash", "policy_id",
              "guardrail_action", "evidence", "model", "provider", "stratum", "key_id", "ledger_height",
              "prev_hash", "ed25519_sig")
    for field in fields:  # every single-field mutation of a receipt
        for how in ("changed", "wrong-type", "removed"):
            assert f"receipt/mutate/{field}/{how}" in ids
    for required in ("bundle/proof/flipped-hash", "bundle/proof/swapped-hashes", "bundle/keys/wrong-key",
                     "receipt/keys/wrong-key", "chain/swapped/first-two",
                     # a receipt signed outside its key's window, on every kind
                     "receipt/key-window/below-not-before-height", "receipt/key-window/after-not-after",
                     "chain/key-window/rewritten-after-rotation", "bundle/key-window/rewritten"):
        assert required in ids
    kinds = {v["kind"] for v in VECTORS}
    assert kinds == {"receipt", "chain", "bundle"}
    valid = [v for v in VECTORS if v["expected"]["valid"]]
    assert 10 <= len(valid) < len(VECTORS) // 2


def test_vectors_are_up_to_date() -> None:
    """The committed files are exactly what the deterministic generator writes."""
    result = subprocess.run([sys.executable, str(VECTORS_DIR / "generate.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
