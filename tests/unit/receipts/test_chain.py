"""The ledger's writer (proxy/receipts/chain.py): a lagging Merkle tree, and turn-taking between contended
writers on one Redis ledger.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from proxy.receipts import Ledger, open_store, verify_store
from proxy.receipts.receipt import (
    GENESIS_PREV_HASH,
    entry_hash,
    seal,
)
from proxy.receipts.signing import Signer
from tests.support.ledger import make_receipt, sqlite_url
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url


async def test_a_lagging_merkle_tree_is_warned_about_once_per_ledger(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Receipts written without tree nodes (an older writer): the ledger appends anyway and says so once."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        signer = Signer.generate()
        older = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
        assert await store.try_append([older], None) is True
        ledger = Ledger(store, signer)
        with caplog.at_level(logging.WARNING, logger="sonate.ledger"):
            await ledger.append([make_receipt()])
            await ledger.append([make_receipt()])
        lag = [r for r in caplog.records if "Merkle tree is behind" in r.getMessage()]
        assert len(lag) == 1 and "ledger reindex" in lag[0].getMessage()
        assert (await store.head()).height == 2 and await store.tree_size() == 0
    finally:
        await store.close()


@pytest.mark.parametrize("older", [0, 1], ids=["tree-in-sync", "tree-lagging"])
async def test_contended_writers_pass_one_turn_token_and_survive_a_stale_one(older: int) -> None:
    """Two writers on one Redis ledger: after a lost race the loser takes turns (proxy/receipts/chain.py).

    Exactly one token circulates and it names the head last written; a stale token (the head moved
    since) is refused by the compare-and-set and the writer re-seals on the head it gets back. With
    ``older`` receipts written without tree nodes first, the tree lags and tokens carry no compact range.
    """
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        if older:
            first = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
            assert await store.try_append([first], None) is True
        a = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        b = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        await a.append([make_receipt()])
        await b.append([make_receipt()])
        await a.append([make_receipt()])  # a lost a race: from now on it takes turns
        await a.append([make_receipt()])  # takes the token its last append handed on, hands on a new one
        assert a.lost_races == 1
        turn = await store.take_turn(0.05)
        assert turn is not None and turn[0] == await store.head() and turn[0].height == older + 3
        assert await store.take_turn(0.01) is None  # one token, not one per append
        stale = await store.get_by_height(1)
        await store._redis.rpush(store.key("turn"), f"1|{entry_hash(stale)}|")
        [receipt] = await a.append([make_receipt()])
        assert receipt["ledger_height"] == older + 4 and a.lost_races == 2
        assert (await verify_store(store, {signer.key_id: signer.public_key})) == (older + 5, [])
    finally:
        await store.close()
        delete_redis_namespace(url)


async def test_a_writer_appends_on_the_newer_head_a_token_brings_and_keeps_taking_turns() -> None:
    """The token from another writer names a head this writer has not seen: it seals on that head at once
    (no lost race), stays in contended mode, and hands the token on with each head it writes."""
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        a = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        b = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        await a.append([make_receipt()])  # h0
        await b.append([make_receipt()])  # h1
        await a.append([make_receipt()])  # a loses a race, writes h2, hands on a token naming h2
        await b.append([make_receipt()])  # b loses a race, takes the token, writes h3, hands on h3
        [moved_on] = await a.append([make_receipt()])  # a knew h2; the token brings h3
        assert moved_on["ledger_height"] == 4 and (a.lost_races, b.lost_races) == (1, 1)
        [again] = await a.append([make_receipt()])  # still contended: takes its own token back
        assert again["ledger_height"] == 5
        turn = await store.take_turn(0.05)
        assert turn is not None and turn[0] == await store.head() and turn[0].height == 5
        assert await store.take_turn(0.01) is None
        assert (await verify_store(store, {signer.key_id: signer.public_key})) == (6, [])
    finally:
        await store.close()
        delete_redis_namespace(url)


async def test_turn_taking_ends_contended_s_after_the_last_lost_race() -> None:
    """Taking back its own token does not prolong a writer's contended mode: it stops handing tokens on."""
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        a = Ledger(store, signer, contended_s=0.5, turn_timeout_s=0.05)
        b = Ledger(store, signer)
        await a.append([make_receipt()])
        await b.append([make_receipt()])
        await a.append([make_receipt()])  # lost race at time t: contended until t + 0.5 s
        lost_at = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() < lost_at + 1.0:  # appends 0.05 s apart, each inside 0.5 s of the last
            await a.append([make_receipt()])
            await asyncio.sleep(0.05)
        await a.append([make_receipt()])
        head = await store.head()
        turn = await store.take_turn(0.05)  # the token the last contended append handed on, not the newest head
        assert a.lost_races == 1 and turn is not None and turn[0].height < head.height
    finally:
        await store.close()
        delete_redis_namespace(url)
