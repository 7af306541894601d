"""One conformance suite for every LedgerStore: SQLite (tmp file) and the real Redis.

docs/architecture.md, "Trust receipts": append a batch atomically (compare-and-set on
the head), get by height or id, head, range, review queues; concurrent
appends never fork or gap the chain; an unreachable store says so.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from proxy.receipts import (
    GENESIS_PREV_HASH,
    Head,
    Ledger,
    LedgerConflict,
    LedgerUnavailable,
    Signer,
    canonical,
    entry_hash,
    open_store,
    seal,
    verify_store,
)
from proxy.storage.base import QUEUES, LedgerStore
from tests.support.ledger import (  # noqa: F401  (fixtures)
    STORE_KINDS,
    keys,
    ledger_url,
    make_receipt,
    signer,
    sqlite_url,
    store,
)
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url, redis_url

both = pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)
redis_only = pytest.mark.parametrize("ledger_url", ["redis"], indirect=True)


def _sealed(signer: Signer, head: Head | None, count: int = 1) -> list[dict[str, Any]]:
    """``count`` fresh receipts chained on ``head``."""
    out: list[dict[str, Any]] = []
    prev = GENESIS_PREV_HASH if head is None else head.entry_hash
    start = 0 if head is None else head.height + 1
    for offset in range(count):
        out.append(seal(make_receipt(), ledger_height=start + offset, prev_hash=prev, signer=signer))
        prev = entry_hash(out[-1])
    return out


@both
async def test_empty_store(store: LedgerStore) -> None:
    await store.ping()
    assert await store.head() is None
    assert await store.get_by_height(0) is None
    assert await store.get_by_id("rcpt_" + "0" * 32) is None
    assert await store.range(0, 10) == []
    assert await store.list_items("escalations") == []
    assert await store.list_items("adjudications") == []


@both
async def test_append_get_range_head(store: LedgerStore, signer: Signer, keys: dict[str, bytes]) -> None:
    ledger = Ledger(store, signer)
    sealed: list[dict[str, Any]] = []
    for size in (1, 2, 3):
        batch = [make_receipt(evidence={"note": "caf\u00e9 \U0001f600", "spans": [[0, 4]]}) for _ in range(size)]
        sealed += await ledger.append(batch)
    assert [r["ledger_height"] for r in sealed] == list(range(6))
    assert sealed[0]["prev_hash"] == GENESIS_PREV_HASH
    assert all(sealed[i]["prev_hash"] == entry_hash(sealed[i - 1]) for i in range(1, 6))

    assert await store.head() == Head(5, entry_hash(sealed[-1]))
    for receipt in sealed:
        assert await store.get_by_height(receipt["ledger_height"]) == receipt
        assert await store.get_by_id(receipt["receipt_id"]) == receipt
    assert await store.range(2, 5) == sealed[2:5]
    assert await store.range(4, 1000) == sealed[4:]
    assert await store.range(6, 10) == [] and await store.range(3, 3) == []
    assert await verify_store(store, keys) == (6, [])
    assert await verify_store(store, keys, start=2, end=4) == (2, [])


@both
async def test_stale_head_is_refused_and_writes_nothing(store: LedgerStore, signer: Signer) -> None:
    first = _sealed(signer, None, 2)
    assert await store.try_append(first, None) is True
    head = await store.head()
    assert head == Head(1, entry_hash(first[-1]))

    stale = Head(0, entry_hash(first[0]))
    late = _sealed(signer, stale, 2)  # heights 1, 2: would fork height 1
    assert await store.try_append(late, stale) is False
    assert await store.try_append(_sealed(signer, None, 1), None) is False  # "empty" is stale too
    wrong_hash = Head(1, entry_hash(first[0]))
    assert await store.try_append(_sealed(signer, wrong_hash, 1), wrong_hash) is False

    assert await store.head() == head
    assert await store.get_by_height(1) == first[1]
    assert await store.get_by_height(2) is None
    assert all([await store.get_by_id(r["receipt_id"]) is None for r in late])

    follow = _sealed(signer, head, 1)
    assert await store.try_append(follow, head) is True
    assert await store.range(0, 10) == first + follow


@both
async def test_batch_heights_must_continue_the_head(store: LedgerStore, signer: Signer) -> None:
    with pytest.raises(ValueError, match="expected 0"):
        await store.try_append(_sealed(signer, Head(4, "sha256:" + "1" * 64), 1), None)
    with pytest.raises(ValueError):
        await store.try_append([], None)
    assert await store.head() is None


@both
async def test_duplicate_receipt_id_conflicts_and_writes_nothing(store: LedgerStore, signer: Signer) -> None:
    first = _sealed(signer, None, 1)
    await store.try_append(first, None)
    head = await store.head()
    clash = seal({**make_receipt(), "receipt_id": first[0]["receipt_id"]}, ledger_height=1,
                 prev_hash=head.entry_hash, signer=signer)
    fresh = seal(make_receipt(), ledger_height=2, prev_hash=entry_hash(clash), signer=signer)
    with pytest.raises(LedgerConflict, match=first[0]["receipt_id"]):
        await store.try_append([clash, fresh], head)
    assert await store.head() == head
    assert await store.get_by_height(1) is None and await store.get_by_id(fresh["receipt_id"]) is None

    twin = _sealed(signer, head, 2)
    twin[1] = seal({**twin[1], "receipt_id": twin[0]["receipt_id"]}, ledger_height=2,
                   prev_hash=entry_hash(twin[0]), signer=signer)
    with pytest.raises(LedgerConflict):
        await store.try_append(twin, head)
    assert await store.head() == head


@both
async def test_ledger_append_is_idempotent_per_receipt(store: LedgerStore, signer: Signer) -> None:
    ledger = Ledger(store, signer)
    batch = [make_receipt(), make_receipt()]
    stored = await ledger.append(batch)
    # A retry of the same batch (e.g. after a lost reply) returns what is stored.
    assert await ledger.append(batch) == stored
    assert (await store.head()).height == 1
    with pytest.raises(LedgerConflict):
        await ledger.append([{**batch[0], "actor": "someone-else"}])
    assert (await store.head()).height == 1


@both
@pytest.mark.parametrize("queue", QUEUES)
async def test_review_queue_crud_order_and_status_cas(store: LedgerStore, queue: str) -> None:
    """Every queue: put/get/list (creation order, by status), update, duplicate ids, status compare-and-set."""
    items = [{"id": f"item_{i}", "status": "open" if i != 1 else "closed", "domain": "legal", "n": i}
             for i in range(4)]
    for item in items:
        await store.put_item(queue, item)
    assert await store.get_item(queue, "item_2") == items[2]
    assert await store.get_item(queue, "item_missing") is None
    assert await store.list_items(queue) == items
    assert await store.list_items(queue, "open") == [items[0], items[2], items[3]]
    assert await store.list_items(queue, "nobody") == []

    resolved = {**items[2], "status": "approved", "reviewer": "rita", "note": "d\u00e9j\u00e0 vu"}
    await store.update_item(queue, resolved)
    assert await store.get_item(queue, "item_2") == resolved
    assert await store.list_items(queue, "open") == [items[0], items[3]]
    assert await store.list_items(queue, "approved") == [resolved]
    assert await store.list_items(queue) == [items[0], items[1], resolved, items[3]]  # creation order kept
    moved = {**items[0], "status": "awaiting_b", "verdicts": {"A": {"breach": False}}}
    await store.update_item(queue, moved, expected_status="open")
    assert await store.list_items(queue, "awaiting_b") == [moved]

    with pytest.raises(LedgerConflict):
        await store.put_item(queue, {"id": "item_1", "status": "open"})
    assert await store.get_item(queue, "item_1") == items[1]
    with pytest.raises(KeyError):
        await store.update_item(queue, {"id": "item_missing", "status": "open"})
    with pytest.raises(LedgerConflict):  # stale expectation: nothing written
        await store.update_item(queue, {**items[1], "status": "open"}, expected_status="open")
    assert await store.get_item(queue, "item_1") == items[1]
    # Compare-and-set on the status: only one of two racing reviewers wins.
    racers = [store.update_item(queue, {**items[3], "status": status}, expected_status="open")
              for status in ("approved", "rejected")]
    outcomes = await asyncio.gather(*racers, return_exceptions=True)
    assert sum(o is None for o in outcomes) == 1
    assert sum(isinstance(o, LedgerConflict) for o in outcomes) == 1
    assert (await store.get_item(queue, "item_3"))["status"] in ("approved", "rejected")
    assert await store.list_items(queue, "open") == []
    with pytest.raises(ValueError):
        await store.put_item(queue, {"status": "open"})
    with pytest.raises(ValueError):
        await store.update_item(queue, {"id": "item_0"})


@both
async def test_review_queues_are_apart(store: LedgerStore) -> None:
    """The same id in two queues is two items; an unknown queue is refused."""
    await store.put_item("adjudications", {"id": "x_0", "status": "pending", "kind": "adj"})
    await store.put_item("escalations", {"id": "x_0", "status": "open", "kind": "esc"})
    assert await store.list_items("escalations") == [{"id": "x_0", "status": "open", "kind": "esc"}]
    assert await store.list_items("adjudications") == [{"id": "x_0", "status": "pending", "kind": "adj"}]
    await store.update_item("escalations", {"id": "x_0", "status": "closed"}, expected_status="open")
    assert (await store.get_item("adjudications", "x_0"))["status"] == "pending"
    for call in (store.put_item("cases", {"id": "x_1", "status": "open"}), store.get_item("cases", "x_0"),
                 store.list_items("cases"), store.update_item("cases", {"id": "x_0", "status": "open"})):
        with pytest.raises(ValueError, match="unknown review queue"):
            await call


async def _all_pages(store: LedgerStore, queue: str, statuses: Any = None, limit: int = 10) -> list[list[str]]:
    """The ids of every page of ``queue``, following the cursors."""
    pages, cursor = [], None
    while True:
        items, cursor = await store.page_items(queue, statuses, after=cursor, limit=limit)
        pages.append([i["id"] for i in items])
        if cursor is None:
            return pages
        assert cursor == items[-1]["id"]


@both
@pytest.mark.parametrize("queue", QUEUES)
async def test_review_queue_pages(store: LedgerStore, queue: str) -> None:
    """Pages in creation order with a cursor (the last id), by one or several statuses; limit 1..1000."""
    statuses = ["pending", "awaiting_b", "agreed"]
    items = [{"id": f"it_{i:02d}", "status": statuses[i % 3], "n": i} for i in range(25)]
    for item in items:
        await store.put_item(queue, item)
    ids = [i["id"] for i in items]
    assert await _all_pages(store, queue) == [ids[:10], ids[10:20], ids[20:]]
    assert await _all_pages(store, queue, limit=5) == [ids[i:i + 5] for i in range(0, 25, 5)]  # exact multiple
    assert await _all_pages(store, queue, limit=1000) == [ids]
    assert await _all_pages(store, queue, "agreed", limit=3) == [ids[2:9:3], ids[11:18:3], ids[20:25:3]]
    open_ids = [i for n, i in enumerate(ids) if n % 3 != 2]  # two statuses merged in creation order
    assert sum(await _all_pages(store, queue, ("pending", "awaiting_b"), limit=4), []) == open_ids
    # The cursor is a position: an item that changed status still marks where the next page starts.
    await store.update_item(queue, {**items[3], "status": "resolved"})
    page, cursor = await store.page_items(queue, "pending", after="it_03", limit=2)
    assert [i["id"] for i in page] == ["it_06", "it_09"] and cursor == "it_09"
    assert await store.page_items(queue, "nobody") == ([], None)
    with pytest.raises(KeyError):
        await store.page_items(queue, after="it_missing")
    for bad in (0, 1001, -1, True, "10"):
        with pytest.raises(ValueError, match="limit"):
            await store.page_items(queue, limit=bad)
    with pytest.raises(ValueError, match="unknown review queue"):
        await store.page_items("cases")


@both
async def test_review_queue_pages_under_concurrent_inserts(store: LedgerStore) -> None:
    """A client paging while others insert sees every earlier item once, in creation order."""
    queue = "adjudications"
    for i in range(40):
        await store.put_item(queue, {"id": f"old_{i:02d}", "status": "pending"})

    async def insert(worker: int) -> None:
        for i in range(15):
            await store.put_item(queue, {"id": f"new_{worker}_{i:02d}", "status": "pending"})
            await asyncio.sleep(0)

    async def page_all() -> list[str]:
        seen, cursor = [], None
        while True:
            items, cursor = await store.page_items(queue, "pending", after=cursor, limit=3)
            seen += [i["id"] for i in items]
            if cursor is None:
                return seen
            await asyncio.sleep(0)

    seen, *_ = await asyncio.gather(page_all(), *(insert(w) for w in range(3)))
    assert len(seen) == len(set(seen)), "an item was listed twice"
    assert seen[:40] == [f"old_{i:02d}" for i in range(40)]
    final = [i["id"] for i in (await store.page_items(queue, limit=1000))[0]]
    assert seen == final[:len(seen)], "pages are not the creation order"


@both
async def test_concurrent_tasks_produce_one_valid_chain(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer)
    rng = random.Random(7)
    sizes = [[rng.randint(1, 3) for _ in range(4)] for _ in range(25)]

    async def client(plan: list[int]) -> list[list[str]]:
        return [[r["receipt_id"] for r in await ledger.append([make_receipt() for _ in range(n)])] for n in plan]

    results = await asyncio.gather(*(client(plan) for plan in sizes))
    total = sum(map(sum, sizes))
    assert await verify_store(store, keys) == (total, [])
    heights = {r["receipt_id"]: r["ledger_height"] for r in await store.range(0, total)}
    for batches in results:
        for batch in batches:  # every batch landed contiguously
            assert [heights[i] for i in batch] == list(range(heights[batch[0]], heights[batch[0]] + len(batch)))


@both
async def test_competing_writers_race_through_compare_and_set(
    ledger_url: str, signer: Signer, keys: dict[str, bytes]
) -> None:
    # Two stores on one ledger = two independent writers (as two processes would be).
    stores = [open_store(ledger_url), open_store(ledger_url)]
    try:
        ledgers = [Ledger(s, signer) for s in stores]
        jobs = [ledgers[i % 2].append([make_receipt() for _ in range(1 + i % 3)]) for i in range(60)]
        appended = await asyncio.gather(*jobs)
        total = sum(len(batch) for batch in appended)
        assert await verify_store(stores[0], keys) == (total, [])
        assert sorted(r["ledger_height"] for batch in appended for r in batch) == list(range(total))
    finally:
        for s in stores:
            await s.close()


@both
async def test_verify_store_detects_tampering_behind_the_store(
    store: LedgerStore, ledger_url: str, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    sealed = await Ledger(store, signer).append([make_receipt() for _ in range(5)])
    forged = {**sealed[2], "guardrail_action": "allow", "actor": "mallory"}
    if ledger_url.startswith("sqlite"):
        with sqlite3.connect(tmp_path / "ledger.db") as db:
            db.execute("UPDATE receipts SET body = ? WHERE height = 2", (json.dumps(forged),))
    else:
        client = aioredis.Redis.from_url(redis_url())
        await client.set(store.key("r", 2), canonical(forged))
        await client.aclose()
    count, failures = await verify_store(store, keys)
    assert count == 5
    assert [(f.height, f.check) for f in failures] == [(2, "signature"), (3, "prev_hash")]


@both
async def test_concurrent_verify_during_appends_sees_a_consistent_prefix(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    ledger = Ledger(store, signer)
    writer = asyncio.gather(*(ledger.append([make_receipt(), make_receipt()]) for _ in range(20)))
    try:
        for _ in range(5):
            count, failures = await verify_store(store, keys)
            assert failures == [] and count % 2 == 0  # whole batches only
            await asyncio.sleep(0)
    finally:
        await writer
    assert await verify_store(store, keys) == (40, [])


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_unreachable_store_raises_ledger_unavailable(kind: str, tmp_path: Path, signer: Signer) -> None:
    if kind == "redis":
        url = "redis://127.0.0.1:1/0?namespace=dead"
    else:
        (tmp_path / "a-file").write_text("")
        url = sqlite_url(tmp_path / "a-file" / "ledger.db")  # parent is a file: cannot open
    dead = open_store(url)
    started = time.monotonic()
    try:
        with pytest.raises(LedgerUnavailable):
            await dead.ping()
        with pytest.raises(LedgerUnavailable):
            await dead.head()
        with pytest.raises(LedgerUnavailable):
            await Ledger(dead, signer).append([make_receipt()])
    finally:
        await dead.close()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://db/ledger", "unsupported ledger URL"),
        ("sqlite://relative.db", "bad SQLite ledger URL"),
        ("sqlite:///", "bad SQLite ledger URL"),
        ("redis:///0", "bad Redis ledger URL"),
        ("redis://ledger.invalid:7000/0?namespace=a}b", "bad ledger namespace"),
        ("ledger.db", "unsupported ledger URL"),
    ],
)
def test_open_store_rejects_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(url)


@redis_only
async def test_redis_keys_share_one_cluster_slot(store: LedgerStore, signer: Signer) -> None:
    await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    await store.put_item("escalations", {"id": "esc_1", "status": "open"})
    await store.update_item("escalations", {"id": "esc_1", "status": "closed"})
    await store.put_item("adjudications", {"id": "adj_1", "status": "pending"})
    client = aioredis.Redis.from_url(redis_url())
    try:
        prefix = "{" + store.namespace + "}:"
        found = [k.decode() async for k in client.scan_iter(match=prefix + "*", count=1000)]
        assert len(found) >= 3 * 2 + 1 + 4  # receipts, ids, head, case keys
        assert {prefix + "cases", prefix + "cases:s:closed", prefix + "adj", prefix + "adj:s:pending"} <= set(found)
        assert {key_slot(k.encode()) for k in found} == {key_slot(prefix.encode())}
        body = await client.get(prefix + "r:1")
        assert body == canonical(await store.get_by_height(1))  # stored as RFC 8785 JSON
    finally:
        await client.aclose()


async def test_sqlite_relative_url_and_wal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, signer: Signer) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///data/sub/ledger.db")
    try:
        await Ledger(relative, signer).append([make_receipt()])
    finally:
        await relative.close()
    path = tmp_path / "data" / "sub" / "ledger.db"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT count(*) FROM receipts").fetchone()[0] == 1
    again = open_store(f"sqlite:///{path}")  # four slashes: absolute
    try:
        assert (await again.head()).height == 0
    finally:
        await again.close()


async def test_sqlite_review_queues_keep_their_tables(tmp_path: Path) -> None:
    """Existing ledgers need no migration: escalations live in ``cases``, adjudications in ``review_items``."""
    path = tmp_path / "ledger.db"
    store = open_store(sqlite_url(path))
    try:
        await store.put_item("escalations", {"id": "esc_1", "status": "open"})
        await store.put_item("adjudications", {"id": "adj_1", "status": "pending"})
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT id, status FROM cases").fetchall() == [("esc_1", "open")]
        assert db.execute("SELECT id, status FROM review_items").fetchall() == [("adj_1", "pending")]


async def test_redis_namespaces_are_isolated(signer: Signer) -> None:
    urls = [redis_namespace_url("iso") for _ in range(2)]
    stores = [open_store(u) for u in urls]
    try:
        await Ledger(stores[0], signer).append([make_receipt()])
        assert (await stores[0].head()).height == 0 and await stores[1].head() is None
    finally:
        for s, u in zip(stores, urls):
            await s.close()
            delete_redis_namespace(u)


@redis_only
async def test_verify_store_checks_the_redis_head(store: LedgerStore, signer: Signer, keys: dict[str, bytes]) -> None:
    sealed = await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    client = aioredis.Redis.from_url(redis_url())
    try:
        orphan = seal(make_receipt(), ledger_height=3, prev_hash=entry_hash(sealed[-1]), signer=signer)
        await client.set(store.key("r", 3), canonical(orphan))  # written without moving the head
        assert [(f.height, f.check) for f in (await verify_store(store, keys))[1]] == [(3, "head")]
        await client.delete(store.key("r", 3))
        await client.hset(store.key("head"), "entry_hash", entry_hash(sealed[0]))
        count, failures = await verify_store(store, keys)
        assert count == 3 and [(f.height, f.check) for f in failures] == [(2, "head")]
    finally:
        await client.aclose()


async def test_sqlite_opening_while_another_writer_appends(tmp_path: Path, signer: Signer) -> None:
    # A process starting while another one writes must not fail on the WAL switch.
    url = sqlite_url(tmp_path / "busy.db")
    writer_store = open_store(url)
    writer = Ledger(writer_store, signer)
    await writer.append([make_receipt()])
    openers: list[LedgerStore] = []
    try:
        background = asyncio.gather(*(writer.append([make_receipt()]) for _ in range(60)))
        for _ in range(8):
            openers.append(open_store(url))
            await openers[-1].ping()
            await asyncio.sleep(0.002)
        await background
        assert (await openers[-1].head()).height == 60
    finally:
        for s in [writer_store, *openers]:
            await s.close()


# -- Merkle tree nodes and checkpoints (RFC 9162 / C2SP), written atomically with the receipts ----------


async def _assert_tree_matches_receipts(store: LedgerStore, keys: dict[str, bytes]) -> None:
    """The stored tree covers every receipt and every stored node is the one recomputed from them."""
    from proxy.primitives import merkle
    from proxy.receipts.tree import tree_root, verify_tree

    head = await store.head()
    size = 0 if head is None else head.height + 1
    assert await store.tree_size() == size
    assert await verify_tree(store, keys) == (size, [])
    leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in await store.range(0, size)]
    assert await tree_root(store, size) == merkle.root_of_leaves(leaves)


@both
async def test_appends_write_tree_nodes_in_the_same_batch(store: LedgerStore, signer: Signer,
                                                          keys: dict[str, bytes]) -> None:
    from proxy.primitives import merkle

    assert await store.tree_size() == 0 and await store.get_nodes([(0, 0), (3, 1)]) == [None, None]
    ledger = Ledger(store, signer)
    sealed = []
    for size in (1, 2, 3, 1, 5):
        sealed += await ledger.append([make_receipt() for _ in range(size)])
        await _assert_tree_matches_receipts(store, keys)
    leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in sealed]
    nodes, _ = merkle.extend(0, [], leaves)
    ids = sorted(nodes)
    assert await store.get_nodes(ids) == [nodes[n] for n in ids]
    assert await store.get_nodes([(0, len(sealed)), (4, 0)]) == [None, None]  # incomplete nodes are not stored


@both
async def test_a_lost_compare_and_set_writes_no_nodes(store: LedgerStore, signer: Signer) -> None:
    from proxy.primitives import merkle
    from proxy.storage.base import TreeUpdate

    first = _sealed(signer, None, 2)
    leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in first]
    nodes, _ = merkle.extend(0, [], leaves)
    assert await store.try_append(first, None, TreeUpdate(0, 2, nodes)) is True
    stale = _sealed(signer, None, 1)
    fake = {(0, 0): b"\x07" * 32, (5, 9): b"\x07" * 32}
    assert await store.try_append(stale, None, TreeUpdate(0, 1, fake)) is False
    assert await store.get_nodes([(0, 0), (5, 9)]) == [nodes[(0, 0)], None]
    assert await store.tree_size() == 2
    with pytest.raises(ValueError, match="does not cover"):
        await store.try_append(_sealed(signer, await store.head(), 1), await store.head(), TreeUpdate(0, 1, {}))
    with pytest.raises(ValueError, match="bad tree node"):
        head = await store.head()
        await store.try_append(_sealed(signer, head, 1), head, TreeUpdate(2, 3, {(0, 2): b"short"}))
    assert (await store.head()).height == 1


@both
async def test_competing_writers_keep_one_tree(ledger_url: str, signer: Signer, keys: dict[str, bytes]) -> None:
    stores = [open_store(ledger_url), open_store(ledger_url)]
    try:
        ledgers = [Ledger(s, signer) for s in stores]  # each caches its own frontier: the other's appends
        jobs = [ledgers[i % 2].append([make_receipt() for _ in range(1 + i % 3)]) for i in range(40)]
        await asyncio.gather(*jobs)
        await _assert_tree_matches_receipts(stores[1], keys)
    finally:
        for s in stores:
            await s.close()


@both
async def test_a_ledger_without_nodes_is_backfilled_by_reindex(store: LedgerStore, signer: Signer,
                                                               keys: dict[str, bytes]) -> None:
    """The migration-free path: receipts written without a tree (an older version) get nodes later."""
    from proxy.receipts.tree import reindex
    from proxy.storage.base import TreeUpdate

    head = None
    for _ in range(7):  # an older writer: receipts only
        batch = _sealed(signer, head, 3)
        assert await store.try_append(batch, head) is True
        head = await store.head()
    assert await store.tree_size() == 0
    ledger = Ledger(store, signer)
    await ledger.append([make_receipt()])  # tree lags: the ledger appends without nodes, never fails
    assert await store.tree_size() == 0
    assert await store.put_nodes(TreeUpdate(0, 23, {})) is False  # beyond the receipts
    assert await store.put_nodes(TreeUpdate(5, 6, {})) is False  # stale tree size
    progress: list[int] = []
    assert await reindex(store, page=4, progress=progress.append) == 22
    assert sum(progress) == 22
    await _assert_tree_matches_receipts(store, keys)
    await ledger.append([make_receipt() for _ in range(4)])  # in sync again: nodes written with receipts
    await _assert_tree_matches_receipts(store, keys)
    assert await reindex(store) == 26  # nothing left to do


@both
async def test_verify_tree_detects_a_bad_node_and_a_bad_checkpoint(store: LedgerStore, signer: Signer,
                                                                   keys: dict[str, bytes]) -> None:
    from proxy.receipts.tree import publish_checkpoint, verify_tree
    from proxy.storage.base import TreeUpdate
    from proxy.tlog.checkpoint import format_checkpoint, sign_checkpoint

    await Ledger(store, signer).append([make_receipt() for _ in range(6)])
    await publish_checkpoint(store, signer, "test/log")
    assert await verify_tree(store, keys, "test/log") == (6, [])
    forged = sign_checkpoint(format_checkpoint("test/log", 3, b"\x01" * 32), signer)
    assert await store.put_checkpoint(3, forged) is True
    # overwrite one stored node behind the ledger's back (put_nodes with the current size passes the CAS)
    assert await store.put_nodes(TreeUpdate(6, 6, {(1, 1): b"\x02" * 32})) is True
    count, failures = await verify_tree(store, keys, "test/log")
    assert count == 6
    assert {(f.check, f.where) for f in failures} == {("tree", None), ("checkpoint", "checkpoint (tree size 3)")}
    assert any("(1, 1)" in f.detail for f in failures)
