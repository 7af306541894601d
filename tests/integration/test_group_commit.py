"""Group commit: concurrent appends of one process share atomic writes; a writer
that loses the compare-and-set race gets the current head back and re-seals without another read.

Real SQLite and the session's real Redis; the chain and the Merkle tree are verified with the
project's own verifiers after every scenario (docs/architecture.md "Trust receipts").
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from proxy.primitives import merkle
from proxy.receipts import Ledger, LedgerConflict, Signer, entry_hash, open_store, verify_store
from proxy.receipts.sealing import PreparedReceipt
from proxy.receipts.tree import verify_tree
from proxy.storage.base import LedgerStore
from tests.support.ledger import (  # noqa: F401  (fixtures)
    STORE_KINDS,
    keys,
    ledger_url,
    make_receipt,
    signer,
    store,
)

both = pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)


async def _assert_whole(store: LedgerStore, keys: dict[str, bytes], size: int) -> list[dict[str, Any]]:
    """The ledger holds ``size`` receipts, every signature and link verifies, and the tree is whole."""
    assert await verify_store(store, keys) == (size, [])
    assert await store.tree_size() == size
    assert await verify_tree(store, keys) == (size, [])
    return await store.range(0, size)


@both
async def test_concurrent_appends_share_writes_and_stay_contiguous(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer, max_batch=16)
    sizes = [1 + i % 3 for i in range(60)]
    batches = [[make_receipt() for _ in range(n)] for n in sizes]
    results = await asyncio.gather(*(ledger.append(batch) for batch in batches))

    total = sum(sizes)
    chain = await _assert_whole(store, keys, total)
    assert ledger.writes < len(batches)  # grouped: fewer atomic writes than append calls
    assert ledger.writes >= total / 16  # and no group went over max_batch
    for batch, sealed in zip(batches, results):  # each call gets its own receipts, contiguous, in order
        assert [r["receipt_id"] for r in sealed] == [r["receipt_id"] for r in batch]
        first = sealed[0]["ledger_height"]
        assert [r["ledger_height"] for r in sealed] == list(range(first, first + len(batch)))
        assert [chain[r["ledger_height"]] for r in sealed] == sealed


@both
async def test_lost_race_returns_the_head_and_compact_range(store: LedgerStore, signer: Signer) -> None:
    first = Ledger(store, signer)
    second = Ledger(store, signer)
    await first.append([make_receipt() for _ in range(5)])
    stale = await store.head()
    await second.append([make_receipt() for _ in range(2)])
    current = await store.head()
    sealed = PreparedReceipt(make_receipt()).seal(stale.height + 1, stale.entry_hash, signer)
    outcome = await store.compare_and_append([sealed.receipt], stale, encoded=[sealed.encoded])
    assert outcome.appended is False and outcome.head == current
    stored = await store.get_nodes(merkle.frontier_ids(current.height + 1))
    assert outcome.frontier == stored  # the loser can extend the tree without reading it
    assert (await store.head()) == current and await store.get_by_id(sealed.receipt["receipt_id"]) is None
    resealed = PreparedReceipt(sealed.receipt).seal(current.height + 1, current.entry_hash, signer)
    won = await store.compare_and_append([resealed.receipt], current, encoded=[resealed.encoded])
    assert won.appended is True and won.head == await store.head()
    assert won.head.entry_hash == resealed.entry_hash


@both
async def test_a_loser_reseals_on_the_returned_head(store: LedgerStore, signer: Signer, keys: dict[str, bytes]) -> None:
    a, b = Ledger(store, signer), Ledger(store, signer)
    await a.append([make_receipt()])  # a now expects its own head
    await b.append([make_receipt(), make_receipt()])  # ... which b moves
    sealed = await a.append([make_receipt()])
    assert a.lost_races == 1 and a.writes == 2
    assert sealed[0]["ledger_height"] == 3
    await _assert_whole(store, keys, 4)


@both
async def test_two_ledgers_racing_keep_one_chain(store: LedgerStore, signer: Signer, keys: dict[str, bytes]) -> None:
    ledgers = [Ledger(store, signer, max_attempts=10_000) for _ in range(3)]

    async def writer(ledger: Ledger) -> None:
        for _ in range(15):
            await asyncio.gather(*(ledger.append([make_receipt()]) for _ in range(4)))

    await asyncio.gather(*(writer(ledger) for ledger in ledgers))
    await _assert_whole(store, keys, 3 * 15 * 4)


@both
async def test_a_taken_receipt_id_fails_only_its_own_call(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer)
    stored = await ledger.append([make_receipt()])
    clash = dict(make_receipt(), receipt_id=stored[0]["receipt_id"])  # same id, other content
    retry = {k: v for k, v in stored[0].items() if k not in ("key_id", "ledger_height", "prev_hash", "ed25519_sig")}
    others = [[make_receipt()] for _ in range(6)]
    results = await asyncio.gather(ledger.append([clash]), ledger.append([retry]),
                                   *(ledger.append(batch) for batch in others), return_exceptions=True)
    assert isinstance(results[0], LedgerConflict)
    assert results[1] == stored  # a retry of a stored batch returns the stored copies
    assert all(isinstance(r, list) and len(r) == 1 for r in results[2:])
    await _assert_whole(store, keys, 1 + len(others))


@both
async def test_a_malformed_receipt_is_refused_before_it_joins_a_group(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer)
    bad_float = dict(make_receipt(), evidence={"score": 0.5})
    bad_field = dict(make_receipt(), receipt_id="nope")
    results = await asyncio.gather(ledger.append([bad_float]), ledger.append([bad_field]),
                                   ledger.append([make_receipt()]), return_exceptions=True)
    assert isinstance(results[0], TypeError) and "$.evidence.score" in str(results[0])
    assert isinstance(results[1], ValueError) and "receipt_id" in str(results[1])
    assert isinstance(results[2], list)
    with pytest.raises(LedgerConflict):
        same = make_receipt()
        await ledger.append([same, dict(same)])
    await _assert_whole(store, keys, 1)


@both
async def test_a_call_cancelled_before_its_group_is_written_writes_nothing(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer)
    kept, dropped = make_receipt(), make_receipt()
    first = asyncio.create_task(ledger.append([kept]))
    second = asyncio.create_task(ledger.append([dropped]))
    await asyncio.sleep(0)  # both are queued; the appender has not taken them yet
    second.cancel()
    await first
    with pytest.raises(asyncio.CancelledError):
        await second
    assert await store.get_by_id(dropped["receipt_id"]) is None
    assert (await store.get_by_id(kept["receipt_id"]))["ledger_height"] == 0
    await _assert_whole(store, keys, 1)


@both
async def test_listeners_hear_each_write(store: LedgerStore, signer: Signer) -> None:
    ledger = Ledger(store, signer)
    sizes: list[int] = []
    ledger.listeners.append(sizes.append)
    written = await asyncio.gather(*(ledger.append([make_receipt()]) for _ in range(10)))
    written.append(await ledger.append([make_receipt()]))
    assert sizes[-1] == 11 and sizes == sorted(sizes) and len(sizes) == ledger.writes
    assert sorted((r for batch in written for r in batch), key=lambda r: r["ledger_height"]) == \
        await store.range(0, 11)


redis_only = pytest.mark.parametrize("ledger_url", ["redis"], indirect=True)


@redis_only
async def test_contended_writers_take_turns_and_survive_lost_and_stale_tokens(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    a = Ledger(store, signer, turn_timeout_s=0.05)
    b = Ledger(store, signer, turn_timeout_s=0.05)
    await a.append([make_receipt()])
    await b.append([make_receipt()])
    await a.append([make_receipt()])  # a lost a race: contended, it takes turns from now on
    assert a.lost_races == 1
    turn = await store.take_turn(0.05)  # a's append handed the token on with the head it wrote
    assert turn is not None and turn[0] == await store.head()
    assert turn[1] == await store.get_nodes(merkle.frontier_ids(3))
    # No token at all (its holder was killed): a waits turn_timeout_s, then appends on what it knows.
    await a.append([make_receipt()])
    # A stale token (another writer moved the head since): the compare-and-set refuses it; a retries.
    await b.append([make_receipt()])
    stale = await store.get_by_height(1)
    await store._redis.delete(store.key("turn"))
    await store._redis.rpush(store.key("turn"), f"1|{entry_hash(stale)}|")
    await asyncio.gather(*(ledger.append([make_receipt()]) for ledger in (a, b, a, b)))
    await _assert_whole(store, keys, 9)


@redis_only
async def test_a_redis_user_without_list_commands_appends_without_turns(
    ledger_url: str, signer: Signer, keys: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL that allows the append script but not BLPOP/RPUSH: contended writers append anyway."""
    parts = urlsplit(ledger_url)
    admin = aioredis.Redis(host=parts.hostname, port=parts.port)
    user = "nolists-" + uuid.uuid4().hex[:8]
    await admin.execute_command("ACL", "SETUSER", user, "on", ">pw-for-test", "~*", "&*", "+@all", "-@list")
    limited = open_store(ledger_url.replace("redis://", f"redis://{user}:pw-for-test@", 1))
    try:
        a, b = Ledger(limited, signer, turn_timeout_s=0.05), Ledger(limited, signer, turn_timeout_s=0.05)
        await a.append([make_receipt()])
        await b.append([make_receipt()])
        await asyncio.gather(*(ledger.append([make_receipt()]) for ledger in (a, b, a, b, a)))
        assert a.lost_races >= 1 and "without turn-taking" in caplog.text
        await _assert_whole(limited, keys, 7)
    finally:
        await limited.close()
        await admin.execute_command("ACL", "DELUSER", user)
        await admin.aclose()
