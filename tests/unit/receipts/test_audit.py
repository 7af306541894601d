"""Contract tests of the ledger audit (proxy/receipts/audit.py) written against surviving mutants (mutation/baseline.md).

What an auditor reads for one sampled height (docs/receipts.md "Ledger audit"): the result label
(:data:`proxy.receipts.audit.RESULTS`) and the exact failures behind it. The chain rule checked here is
docs/architecture.md "Chain" (RFC 9162 §2.1 style hash chaining: ``prev_hash`` of height h is the entry
hash of the receipt at h - 1): when the receipt below a sampled height is stored but unreadable (JSON
without a usable ``ledger_height``), verify_receipt cannot judge the link, so the audit reports that
the link cannot be checked, naming the height below; a stored value that is JSON but no object fails
the schema. The schema problems a verifier prints for a missing or an unexpected field
(docs/architecture.md "Trust receipts": exactly the receipt fields, no more, no fewer) are checked
word for word, as str(Failure) shows them. Real parts only: a Ledger over a real SQLite file in tmp_path, rewritten with sqlite3 the
way an attacker with write access to the file would (tests/support/ledger.py helpers).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer
from proxy.receipts.audit import AuditResult, audit_heights
from proxy.receipts.receipt import GENESIS_PREV_HASH, schema_problems, seal
from proxy.receipts.verify import verify_receipt
from proxy.storage.base import LedgerStore
from tests.support.ledger import keys, make_receipt, signer, sqlite_store, sqlite_url  # noqa: F401  (fixtures)


def _overwrite(tmp_path: Path, height: int, body: Any) -> None:
    """Store ``body`` (as JSON) at ``height`` in place of the sealed receipt; the head is untouched."""
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute("UPDATE receipts SET body = ? WHERE height = ?", (json.dumps(body), height))


async def test_a_receipt_above_an_unreadable_one_fails_its_link_naming_the_height_below(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    """Height 1 above an object without a ledger_height at 0 (the lowest height that has a link), and height 3
    above one at 2: each fails ``prev_hash`` with its own height, receipt_id and the height below it."""
    sealed = await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(4)])
    _overwrite(tmp_path, 0, {"note": "no receipt"})
    _overwrite(tmp_path, 2, {**sealed[2], "ledger_height": "2"})
    results = await audit_heights(sqlite_store, keys, [1, 3])
    assert results == [
        AuditResult(1, "fail_chain", [Failure(1, sealed[1]["receipt_id"], "prev_hash",
                                              "height 0 holds no readable receipt: the link cannot be checked")]),
        AuditResult(3, "fail_chain", [Failure(3, sealed[3]["receipt_id"], "prev_hash",
                                              "height 2 holds no readable receipt: the link cannot be checked")]),
    ]
    assert [str(f) for r in results for f in r.failures] == [
        f"height 1 ({sealed[1]['receipt_id']}): prev_hash: height 0 holds no readable receipt: the link cannot be checked",
        f"height 3 ({sealed[3]['receipt_id']}): prev_hash: height 2 holds no readable receipt: the link cannot be checked",
    ]


async def test_a_stored_value_that_is_json_but_no_object_fails_the_schema(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    """A JSON array at height 2: its result is fail_schema (not merely "not pass"), from the one schema failure
    verify_receipt finds; the receipt above it fails its link, the one below still passes."""
    sealed = await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(4)])
    _overwrite(tmp_path, 2, [1, 2])
    below, stored, above = await audit_heights(sqlite_store, keys, [1, 2, 3])
    assert below == AuditResult(1, "pass", [])
    assert stored == AuditResult(2, "fail_schema", [Failure(None, None, "schema", "$: receipt must be a JSON object")])
    assert above == AuditResult(3, "fail_chain", [Failure(3, sealed[3]["receipt_id"], "prev_hash",
                                                          "height 2 holds no readable receipt: the link cannot be checked")])


def test_a_missing_and_an_unexpected_field_are_named_word_for_word(signer: Signer, keys: dict[str, bytes]) -> None:
    """A sealed receipt without ``actor`` and with an extra ``note``: both schema problems, in field order then
    extra fields, as the verifier prints them; an unsealed receipt lacks the chain fields the same way."""
    sealed = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    body = {k: v for k, v in sealed.items() if k != "actor"} | {"note": "x"}
    assert schema_problems(body) == [("actor", "missing"), ("note", "unexpected field")]
    fails = verify_receipt(body, keys)
    assert [str(f) for f in fails if f.check == "schema"] == [
        f"height 0 ({sealed['receipt_id']}): schema: actor: missing",
        f"height 0 ({sealed['receipt_id']}): schema: note: unexpected field",
    ]
    unsealed = make_receipt()
    assert schema_problems(unsealed) == [(name, "missing") for name in ("key_id", "ledger_height", "prev_hash",
                                                                         "ed25519_sig")]
    assert schema_problems(unsealed, sealed=False) == []
    assert schema_problems({**unsealed, "key_id": "x"}, sealed=False) == [("key_id", "unexpected field")]
    with pytest.raises(ValueError, match=r"^stratum: missing$"):
        seal({k: v for k, v in unsealed.items() if k != "stratum"}, ledger_height=0, prev_hash=GENESIS_PREV_HASH,
             signer=signer)
