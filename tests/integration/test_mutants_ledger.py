"""Contract tests of verify_store's ``head`` check (proxy/receipts/verify.py) written against surviving mutants
(mutation/baseline.md).

docs/receipts.md "Trust receipts and verification": the store's head must name the last receipt's
height and entry hash (docs/architecture.md "Chain"; the signed tree head of RFC 9162 §4.10 plays the
same role for the Merkle tree), and a store holding receipts but no head is no empty ledger. These
states cannot be made in SQLite (its head is the highest stored row), so the tests use the session's
real Redis (tests/support/ledger.py fixtures) and delete keys the way an attacker with write access
to Redis would. They assert the exact failures a user reads, str(Failure) included.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, verify_store
from proxy.storage.base import LedgerStore
from tests.support.ledger import keys, ledger_url, make_receipt, signer, store  # noqa: F401  (fixtures)
from tests.support.redis_server import redis_url

redis_only = pytest.mark.parametrize("ledger_url", ["redis"], indirect=True)


async def _delete(store: LedgerStore, *parts: tuple[object, ...]) -> None:
    client = aioredis.Redis.from_url(redis_url())
    try:
        await client.delete(*(store.key(*p) for p in parts))
    finally:
        await client.aclose()


@redis_only
async def test_receipts_without_a_head_fail_head_with_the_documented_detail(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """The head key deleted: the receipt at ``start`` is reported, at ``start``, and nothing is counted."""
    sealed = await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    await _delete(store, ("head",))
    count, failures = await verify_store(store, keys)
    assert (count, failures) == (0, [Failure(0, sealed[0]["receipt_id"], "head",
                                             "receipts are stored but the ledger has no head")])
    assert str(failures[0]) == f"height 0 ({sealed[0]['receipt_id']}): head: receipts are stored but the ledger has no head"
    assert await verify_store(store, keys, start=2) == (0, [Failure(2, sealed[2]["receipt_id"], "head",
                                                                    "receipts are stored but the ledger has no head")])
    assert await verify_store(store, keys, start=3) == (0, [])  # nothing stored at start: an empty ledger


@redis_only
async def test_a_head_over_no_stored_receipt_names_no_last_receipt_hash(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """Every receipt deleted, the head kept: no receipt was read, so the head failure names no hash and no height
    (not the hash of JSON null, nor of any other stand-in)."""
    await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    head = await store.head()
    await _delete(store, *(("r", h) for h in range(3)))
    count, failures = await verify_store(store, keys)
    assert (count, failures) == (0, [
        Failure(2, None, "height", "missing: height 0..2 not found"),
        Failure(2, None, "head", f"head says {head.entry_hash} at 2, last receipt is None at None"),
    ])
