"""The receipt spool and the fault-policy sinks, in process, over a real redis-server that the tests kill.

Fault policy (docs/operations.md "Fault policy"): ``spool`` keeps receipts in a durable local file while the
ledger is down, replays them in order when it returns (no fork, no gap, no duplicate), and new
receipts queue behind a non-empty spool; ``fail_closed`` refuses before the model is called.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from proxy.receipts import Ledger, Signer, load_public_keys, open_store, public_key_entry, verify_store
from proxy.server.admission.sink import LedgerSink, SpoolingSink
from proxy.server.admission.spool import Spool, SpoolFull, read_spool_file
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerUnavailable
from tests.support.ledger import make_receipt
from tests.support.redis_server import RedisServer


def test_spool_is_durable_ordered_and_truncated_when_drained(tmp_path: Path) -> None:
    spool = Spool(tmp_path).open()
    first, second = [make_receipt(), make_receipt()], [make_receipt()]
    a, b = spool.append(first), spool.append(second)
    assert (a.seq, b.seq) == (1, 2) and spool.depth == 3
    assert [x.receipts for x in read_spool_file(spool.path)] == [first, second]  # on disk, in order
    assert spool.find(second[0]["receipt_id"]) == second[0]
    with pytest.raises(ValueError):
        spool.ack(2)  # only the oldest batch can leave
    spool.ack(1)
    assert [x.seq for x in read_spool_file(spool.path)] == [2] and spool.depth == 1
    spool.ack(2)
    assert spool.path.stat().st_size == 0 and spool.peek() is None
    spool.close()
    assert not spool.path.exists()  # an empty spool leaves nothing behind


def test_torn_last_line_is_ignored_and_a_full_spool_refuses(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096).open()
    kept = [make_receipt()]
    spool.append(kept)
    with open(spool.path, "ab") as handle:  # a crash in the middle of the next write
        handle.write(b'{"op":"batch","seq":2,"receipts":[{"v":1,')
    assert [x.receipts for x in read_spool_file(spool.path)] == [kept]
    big = [make_receipt(evidence={"blob": "x" * 5000})]
    with pytest.raises(SpoolFull):
        spool.append(big)
    assert isinstance(SpoolFull("x"), LedgerUnavailable)  # the pipeline answers 503 then


def test_orphaned_spool_of_a_dead_process_is_adopted_in_order(tmp_path: Path) -> None:
    dead = Spool(tmp_path).open()
    batches = [[make_receipt()], [make_receipt(), make_receipt()]]
    for batch in batches:
        dead.append(batch)
    dead.ack(1)
    live = Spool(tmp_path).open()
    assert live.adopt_orphans() == 0  # the owner still holds its lock
    os.close(dead._fd)  # the owner dies without cleaning up (its lock goes with its descriptor)
    dead._fd = None
    assert live.adopt_orphans() == 2  # only the unacked batch
    assert [x.receipts for x in read_spool_file(live.path)] == [batches[1]]
    assert not dead.path.exists()
    live.close()


@pytest.fixture()
def redis_server(tmp_path: Path) -> RedisServer:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


async def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_spooling_sink_replays_in_order_after_redis_returns(redis_server: RedisServer, tmp_path: Path) -> None:
    store = open_store(redis_server.url + "?namespace=spool")
    signer = Signer.generate()
    ledger = Ledger(store, signer)
    metrics = Metrics()
    spool = Spool(tmp_path / "spool").open()
    sink = SpoolingSink(ledger, metrics, spool, append_timeout_s=2.0, retry_max_s=0.2)
    issued: list[str] = []
    try:
        before = [make_receipt()]
        assert (await sink.append(before)).pending is False
        issued += [r["receipt_id"] for r in before]
        redis_server.kill()
        down = [[make_receipt()], [make_receipt(), make_receipt()]]
        for batch in down:
            result = await sink.append(batch)
            assert result.pending and [r["receipt_id"] for r in result.receipts] == [r["receipt_id"] for r in batch]
            issued += [r["receipt_id"] for r in batch]
        assert spool.depth == 3 and metrics.spool_depth._value.get() == 3
        redis_server.start()  # same port, same AOF directory
        behind = [make_receipt()]
        assert (await sink.append(behind)).pending is True  # the spool is not empty: queue behind it
        issued += [r["receipt_id"] for r in behind]
        with pytest.raises(LedgerUnavailable):
            await sink.append([make_receipt()], allow_pending=False)  # strict callers wait for the spool
        await sink.start()
        await _wait_for(lambda: spool.depth == 0)
        assert metrics.spool_replayed._value.get() == 4
        keys = load_public_keys(public_key_entry(signer))
        count, failures = await verify_store(store, keys)
        assert failures == [] and count == 5
        stored = [r["receipt_id"] for r in await store.range(0, 10)]
        assert stored == issued  # issue order, no gap, no duplicate
        assert (await sink.append([make_receipt()])).pending is False  # drained: straight to the ledger again
    finally:
        await sink.close()
        await store.close()


async def test_replay_of_a_batch_that_already_landed_adds_nothing(redis_server: RedisServer, tmp_path: Path) -> None:
    """A crash after the append but before the ack: the batch is in the ledger and in the spool."""
    store = open_store(redis_server.url + "?namespace=twice")
    ledger = Ledger(store, Signer.generate())
    spool = Spool(tmp_path / "spool").open()
    sink = SpoolingSink(ledger, Metrics(), spool)
    try:
        batch = [make_receipt(), make_receipt()]
        await ledger.append(batch)
        spool.append(batch)
        assert await sink.replay_once() is True
        head = await store.head()
        assert head.height == 1 and spool.depth == 0  # still two receipts: no duplicate height
    finally:
        await sink.close()
        await store.close()


async def test_fail_closed_sink_refuses_before_the_model_when_redis_is_down(redis_server: RedisServer) -> None:
    store = open_store(redis_server.url + "?namespace=closed")
    sink = LedgerSink(Ledger(store, Signer.generate()), Metrics(), probe_timeout_s=0.5)
    try:
        await sink.before_upstream()  # up: no error
        redis_server.kill()
        started = asyncio.get_running_loop().time()
        results = await asyncio.gather(*(sink.before_upstream() for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, LedgerUnavailable) for r in results), results
        assert asyncio.get_running_loop().time() - started < 3
        with pytest.raises(LedgerUnavailable):
            await sink.append([make_receipt()])
    finally:
        await store.close()


def test_spool_file_lines_are_json_batches(tmp_path: Path) -> None:
    spool = Spool(tmp_path).open()
    receipt = make_receipt()
    spool.append([receipt])
    line = json.loads(spool.path.read_text().splitlines()[0])
    assert line == {"op": "batch", "seq": 1, "receipts": [receipt]}
    assert oct(spool.path.stat().st_mode & 0o777) == "0o600"
    spool.close()


async def test_replay_appends_spooled_batches_together_and_skips_one_that_landed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Spooled batches replay as one atomic write, in spool order; a batch already in the ledger (a crash
    after its append, before its ack) makes the joint append fail, and the batches go one at a time."""
    store = open_store(redis_server.url + "?namespace=together")
    signer = Signer.generate()
    ledger = Ledger(store, signer)
    spool = Spool(tmp_path / "spool").open()
    sink = SpoolingSink(ledger, Metrics(), spool)
    try:
        quick = [[make_receipt()] for _ in range(5)]
        for batch in quick:
            spool.append(batch)
        assert await sink.replay_once() is True
        assert spool.depth == 0 and ledger.writes == 1  # five batches, one write
        first, landed, last = [make_receipt()], [make_receipt(), make_receipt()], [make_receipt()]
        await ledger.append(landed)
        for batch in (first, landed, last):
            spool.append(batch)
        while await sink.replay_once():
            pass
        stored = [r["receipt_id"] for r in await store.range(0, 20)]
        issued = [r["receipt_id"] for batch in quick for r in batch]
        issued += [r["receipt_id"] for r in landed + first + last]
        assert stored == issued and spool.depth == 0  # no duplicate; the spool's order kept
        count, failures = await verify_store(store, load_public_keys(public_key_entry(signer)))
        assert failures == [] and count == len(issued)
    finally:
        await sink.close()
        await store.close()
