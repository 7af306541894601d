"""Group commit: concurrent appends of one process share atomic writes; a writer
that loses the compare-and-set race gets the current head back and re-seals without another read.

Real SQLite and the session's real Redis; the chain and the Merkle tree are verified with the
project's own verifiers after every scenario (docs/architecture.md "Trust receipts").
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Coroutine, TypeVar
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from proxy.primitives import merkle
from proxy.receipts import GENESIS_PREV_HASH, Head, Ledger, LedgerConflict, Signer, entry_hash, open_store, verify_store
from proxy.receipts.sealing import PreparedReceipt
from proxy.receipts.tree import verify_tree
from proxy.storage.base import LedgerStore
from tests.support.ledger import (  # noqa: F401  (fixtures)  # noqa: F401  (fixtures)
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


sqlite_only = pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)

T = TypeVar("T")
SETTLE_S = 5.0  # a group commit that has not settled by then never will (a lost request)


class RivalWriter:
    """A second writer on the ledger at ``url``: its own store, Ledger and event loop, in a thread.

    :meth:`append_one` blocks the caller until the rival has appended one fresh receipt, so calling
    it from ``signer_source`` moves the head between the ledger's head read and its compare-and-set.
    """

    def __init__(self, url: str, signer: Signer) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rival-writer", daemon=True)
        self._thread.start()
        self.store: LedgerStore = self._call(self._open(url))
        self.ledger = Ledger(self.store, signer)
        self.appended: list[dict[str, Any]] = []

    @staticmethod
    async def _open(url: str) -> LedgerStore:
        return open_store(url)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(SETTLE_S)

    def append_one(self) -> None:
        """Append one receipt through the rival's own ledger (blocking)."""
        self.appended += self._call(self.ledger.append([make_receipt(actor="app:rival")]))

    def close(self) -> None:
        """Close the rival's store, stop its loop and thread."""
        self._call(self.store.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(SETTLE_S)
        self._loop.close()


def _sizes(ledger: Ledger) -> list[int]:
    """Register a listener; the returned list collects the ledger size after each atomic write."""
    sizes: list[int] = []
    ledger.listeners.append(sizes.append)
    return sizes


def _assert_chained(sealed: list[dict[str, Any]]) -> None:
    """Heights 0..n-1 and each prev_hash is the previous receipt's entry hash."""
    assert [r["ledger_height"] for r in sealed] == list(range(len(sealed)))
    assert sealed[0]["prev_hash"] == GENESIS_PREV_HASH
    assert all(sealed[i]["prev_hash"] == entry_hash(sealed[i - 1]) for i in range(1, len(sealed)))


# --- constructor bounds --------------------------------------------------------------------------


@sqlite_only
async def test_bounds_of_one_are_allowed_and_zero_is_refused(store: LedgerStore, signer: Signer) -> None:
    """max_attempts=1 and max_batch=1 are valid (only below 1 is refused); max_batch=1: one write per request."""
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        Ledger(store, signer, max_attempts=0)
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        Ledger(store, signer, max_batch=0)
    ledger = Ledger(store, signer, max_attempts=1, max_batch=1)
    assert (ledger.writes, ledger.lost_races) == (0, 0)
    sizes = _sizes(ledger)
    results = await asyncio.wait_for(asyncio.gather(*(ledger.append([make_receipt()]) for _ in range(3))), SETTLE_S)
    assert sizes == [1, 2, 3] and ledger.writes == 3
    _assert_chained([r for sealed in results for r in sealed])


def _always_losing(rival: "RivalWriter", signer: Signer, attempts: list[int]):
    """A ``signer_source`` that lets the rival append before every attempt (so each compare-and-set
    loses) and counts the attempts in ``attempts``."""

    def source() -> Signer:
        attempts.append(1)
        rival.append_one()
        return signer

    return source


@sqlite_only
async def test_max_attempts_one_gives_up_after_the_first_lost_race(
    ledger_url: str, store: LedgerStore, signer: Signer
) -> None:
    """With max_attempts=1 one lost compare-and-set is final: LedgerConflict, nothing of the caller's written."""
    rival = RivalWriter(ledger_url, signer)
    attempts: list[int] = []
    source = _always_losing(rival, signer, attempts)
    try:
        ledger = Ledger(store, signer, max_attempts=1, signer_source=source)
        mine = make_receipt()
        with pytest.raises(LedgerConflict, match="gave up after 1 attempts"):
            await ledger.append([mine])
        assert len(attempts) == 1 and ledger.lost_races == 1 and ledger.writes == 0
        assert await store.get_by_id(mine["receipt_id"]) is None
        assert await store.head() == Head(0, entry_hash(rival.appended[0]))
    finally:
        rival.close()


@sqlite_only
async def test_default_max_attempts_is_fifty(ledger_url: str, store: LedgerStore, signer: Signer) -> None:
    """The head moves before every compare-and-set: a default ledger seals and loses exactly 50 times, then gives up."""
    rival = RivalWriter(ledger_url, signer)
    attempts: list[int] = []
    source = _always_losing(rival, signer, attempts)
    try:
        ledger = Ledger(store, signer, signer_source=source)
        mine = make_receipt()
        with pytest.raises(LedgerConflict, match="gave up after 50 attempts"):
            await ledger.append([mine])
        assert len(attempts) == 50 and ledger.lost_races == 50 and ledger.writes == 0
        assert await store.get_by_id(mine["receipt_id"]) is None
        assert await store.head() == Head(49, entry_hash(rival.appended[-1]))
        _assert_chained(await store.range(0, 60))
    finally:
        rival.close()


# --- group commit: which requests share a write ---------------------------------------------------


@sqlite_only
async def test_default_max_batch_is_64_receipts_per_write(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """65 concurrent single-receipt appends: one write of 64, then one of 1; ``writes`` counts from 0."""
    ledger = Ledger(store, signer)
    sizes = _sizes(ledger)
    assert ledger.writes == 0
    results = await asyncio.wait_for(asyncio.gather(*(ledger.append([make_receipt()]) for _ in range(65))), SETTLE_S)
    assert sizes == [64, 65]
    assert ledger.writes == 2 and ledger.lost_races == 0
    _assert_chained([r for sealed in results for r in sealed])
    assert await verify_store(store, keys) == (65, [])


@sqlite_only
async def test_groups_fill_up_to_max_batch_without_splitting_a_request(store: LedgerStore, signer: Signer) -> None:
    """max_batch=3, requests of 2, 1, 2, 5, 1 receipts: writes [2+1], [2], [5] (a larger request alone), [1]."""
    ledger = Ledger(store, signer, max_batch=3)
    sizes = _sizes(ledger)
    batches = [[make_receipt() for _ in range(n)] for n in (2, 1, 2, 5, 1)]
    results = await asyncio.wait_for(asyncio.gather(*(ledger.append(b) for b in batches)), SETTLE_S)
    assert sizes == [3, 5, 10, 11]
    assert ledger.writes == 4
    for batch, sealed in zip(batches, results):  # each caller gets its own receipts, in order
        assert [r["receipt_id"] for r in sealed] == [r["receipt_id"] for r in batch]
    _assert_chained([r for sealed in results for r in sealed])
    assert await store.range(0, 20) == [r for sealed in results for r in sealed]


@sqlite_only
async def test_a_request_cancelled_while_queued_is_left_out_of_the_group(store: LedgerStore, signer: Signer) -> None:
    """A, B, C queued; B's caller cancels before the appender runs: one write holds A then C; B is never stored."""
    ledger = Ledger(store, signer)
    sizes = _sizes(ledger)
    a, b, c = make_receipt(), make_receipt(), make_receipt()
    tasks = [asyncio.create_task(ledger.append([r])) for r in (a, b, c)]
    await asyncio.sleep(0)  # each task has queued its request; the appender task is created but has not run
    assert ledger.writes == 0 and not any(t.done() for t in tasks)
    tasks[1].cancel()
    sealed_a, sealed_c = await asyncio.wait_for(asyncio.gather(tasks[0], tasks[2]), SETTLE_S)
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert sizes == [2] and ledger.writes == 1
    assert sealed_a[0]["receipt_id"] == a["receipt_id"] and sealed_c[0]["receipt_id"] == c["receipt_id"]
    _assert_chained(sealed_a + sealed_c)
    assert await store.get_by_id(b["receipt_id"]) is None
    assert await store.range(0, 10) == sealed_a + sealed_c


@sqlite_only
async def test_one_appender_per_ledger_so_its_own_groups_never_race(store: LedgerStore, signer: Signer) -> None:
    """Concurrent appends on one ledger are committed one group after another by one task: no lost race."""
    ledger = Ledger(store, signer, max_batch=1)
    results = await asyncio.wait_for(asyncio.gather(*(ledger.append([make_receipt()]) for _ in range(4))), SETTLE_S)
    assert ledger.lost_races == 0 and ledger.writes == 4
    _assert_chained([r for sealed in results for r in sealed])


# --- contended mode: turn taking after a lost race (Redis) -----------------------------------------


async def _lose_one_race(store: LedgerStore, signer: Signer) -> tuple[Ledger, float]:
    """Ledger A writes height 0, B height 1, then A appends on its stale head: it loses once and
    retries in contended mode (no token waits, so it waits turn_timeout_s). Returns A and that append's seconds."""
    first, second = Ledger(store, signer), Ledger(store, signer)
    await first.append([make_receipt()])
    await second.append([make_receipt()])
    started = time.monotonic()
    sealed = await first.append([make_receipt()])
    elapsed = time.monotonic() - started
    assert sealed[0]["ledger_height"] == 2 and first.lost_races == 1 and first.writes == 2
    return first, elapsed


@redis_only
async def test_default_turn_timeout_is_a_short_wait(store: LedgerStore, signer: Signer) -> None:
    """After a lost race with no turn token around, the retry waits turn_timeout_s (0.05 s) for it, not longer."""
    _, elapsed = await _lose_one_race(store, signer)
    assert 0.04 <= elapsed < 0.5


@redis_only
async def test_default_contended_mode_lasts_one_second(
    store: LedgerStore, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within contended_s (1.0 s) of a lost race each append takes and hands on the turn token; after it, none does.

    The token carries the head after the last append that released it; the loop clock is shifted forward.
    """
    loop = asyncio.get_running_loop()
    real_time = loop.time
    shift = [0.0]
    monkeypatch.setattr(loop, "time", lambda: real_time() + shift[0])
    ledger, _ = await _lose_one_race(store, signer)  # the retry released the token: it carries height 2

    shift[0] += 0.5
    inside = await ledger.append([make_receipt()])  # contended: takes the token, hands it on at height 3
    shift[0] += 1.0
    outside = await ledger.append([make_receipt()])  # 1.5 s after the lost race: no turn taking
    assert [inside[0]["ledger_height"], outside[0]["ledger_height"]] == [3, 4]
    assert ledger.lost_races == 1
    turn = await store.take_turn(0.01)
    assert turn is not None and turn[0] == Head(3, entry_hash(inside[0]))
    assert await store.take_turn(0.01) is None  # one token, not one per append


# --- a duplicate receipt_id in a group of two --------------------------------------------------------


@sqlite_only
async def test_a_group_of_two_is_split_so_a_taken_receipt_id_fails_only_its_own_call(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """Two requests share a group; the first's receipt_id is already stored. The group's write conflicts,
    so each request is committed alone: the clash (other content) gets LedgerConflict, a retry of the stored
    receipt gets the stored copy, and the other request of the group is written, not failed with the clash's
    conflict nor answered with the clash's stored copy."""
    ledger = Ledger(store, signer)
    sizes = _sizes(ledger)
    stored = await ledger.append([make_receipt()])
    clash = dict(make_receipt(), receipt_id=stored[0]["receipt_id"])  # same id, other content
    retry = {k: v for k, v in stored[0].items() if k not in ("key_id", "ledger_height", "prev_hash", "ed25519_sig")}
    first, second = make_receipt(), make_receipt()
    conflict, written = await asyncio.wait_for(
        asyncio.gather(ledger.append([clash]), ledger.append([first]), return_exceptions=True), SETTLE_S)
    assert isinstance(conflict, LedgerConflict)
    assert [(r["receipt_id"], r["ledger_height"]) for r in written] == [(first["receipt_id"], 1)]
    again, written_too = await asyncio.wait_for(
        asyncio.gather(ledger.append([retry]), ledger.append([second])), SETTLE_S)
    assert again == stored
    assert [(r["receipt_id"], r["ledger_height"]) for r in written_too] == [(second["receipt_id"], 2)]
    assert sizes == [1, 2, 3] and ledger.writes == 3
    assert await store.range(0, 10) == stored + written + written_too
    assert await verify_store(store, keys) == (3, [])


@sqlite_only
async def test_a_group_that_gives_up_answers_every_caller_with_the_conflict(
    ledger_url: str, store: LedgerStore, signer: Signer
) -> None:
    """max_attempts=1, a group of two requests, and before its compare-and-set another writer stores the first
    request's receipt (same content). The group gave up: both callers get LedgerConflict; the second caller is
    never handed the first caller's stored receipt as its own, and its receipt is not written."""
    rival = RivalWriter(ledger_url, signer)
    first, second = make_receipt(), make_receipt()
    attempts: list[int] = []

    def source() -> Signer:
        attempts.append(1)
        rival.appended += rival._call(rival.ledger.append([first]))  # the same receipt, through the other writer
        return signer

    try:
        ledger = Ledger(store, signer, max_attempts=1, signer_source=source)
        results = await asyncio.wait_for(
            asyncio.gather(ledger.append([first]), ledger.append([second]), return_exceptions=True), SETTLE_S)
        assert all(isinstance(r, LedgerConflict) for r in results), results
        assert [str(r) for r in results] == ["ledger head kept moving: gave up after 1 attempts"] * 2
        assert len(attempts) == 1 and ledger.lost_races == 1 and ledger.writes == 0
        assert await store.range(0, 10) == rival.appended
        assert rival.appended[0]["receipt_id"] == first["receipt_id"]
        assert await store.get_by_id(second["receipt_id"]) is None
    finally:
        rival.close()


@sqlite_only
async def test_after_giving_up_the_ledger_expects_the_head_its_last_lost_race_returned(
    ledger_url: str, store: LedgerStore, signer: Signer
) -> None:
    """The expected head is the one the ledger was last told about, even after it gave up: the head its last
    lost compare-and-set returned. When another writer appends after that, the next append loses once more on
    that head and then writes on the head it gets back."""
    rival = RivalWriter(ledger_url, signer)
    attempts: list[int] = []
    interfering = [True]

    def source() -> Signer:
        attempts.append(1)
        if interfering[0]:
            rival.append_one()
        return signer

    try:
        ledger = Ledger(store, signer, max_attempts=2, signer_source=source)
        with pytest.raises(LedgerConflict, match="gave up after 2 attempts"):
            await asyncio.wait_for(ledger.append([make_receipt()]), SETTLE_S)
        assert (len(attempts), ledger.lost_races, ledger.writes) == (2, 2, 0)
        interfering[0] = False
        rival.append_one()  # the head moves once more after the ledger gave up: heights 0, 1, 2 are the rival's
        [mine] = await asyncio.wait_for(ledger.append([make_receipt()]), SETTLE_S)
        assert mine["ledger_height"] == 3 and mine["prev_hash"] == entry_hash(rival.appended[2])
        assert (len(attempts), ledger.lost_races, ledger.writes) == (4, 3, 1)  # one more lost race, then the write
        _assert_chained(await store.range(0, 10))
    finally:
        rival.close()


@redis_only
async def test_contended_mode_ends_exactly_contended_s_after_the_lost_race(
    store: LedgerStore, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contended mode lasts while the loop time is below lost-race time + contended_s: an append at exactly
    that time no longer takes the turn token, so the token still carries the head of the last contended append.
    The loop clock is held at chosen values around the appends."""
    loop = asyncio.get_running_loop()
    real_time = loop.time
    held: list[float | None] = [None]
    monkeypatch.setattr(loop, "time", lambda: real_time() if held[0] is None else held[0])
    first, second = Ledger(store, signer), Ledger(store, signer)
    await first.append([make_receipt()])
    await second.append([make_receipt()])
    held[0] = 1000.0
    [retried] = await first.append([make_receipt()])  # loses on its stale head at 1000.0; the retry hands on the token
    assert retried["ledger_height"] == 2 and first.lost_races == 1
    held[0] = 1000.0 + 1.0  # contended_s after the lost race, to the last bit
    [after] = await first.append([make_receipt()])
    held[0] = None
    assert after["ledger_height"] == 3 and (first.lost_races, first.writes) == (1, 3)
    turn = await store.take_turn(0.01)
    assert turn is not None and turn[0] == Head(2, entry_hash(retried))  # not taken, not handed on at height 3
    assert await store.take_turn(0.01) is None


@redis_only
async def test_each_append_leaves_the_compact_range_a_losing_writer_is_handed(
    store: LedgerStore, signer: Signer
) -> None:
    """The ledger writes its Merkle nodes and the compact range (RFC 9162) after each group with the receipts,
    so a writer that then loses a compare-and-set gets the current head and that compact range in the same
    reply (AppendOutcome.frontier) and re-seals without reading the tree."""
    from proxy.primitives import merkle
    from proxy.receipts import seal

    ledger = Ledger(store, signer)
    written: list[dict[str, Any]] = []
    for size in (3, 5):
        written += await ledger.append([make_receipt() for _ in range(size - len(written))])
        leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in written]  # RFC 9162 leaf hashes
        _, expected = merkle.extend(0, [], leaves)
        assert await store.tree_size() == size
        assert await store.get_nodes(merkle.frontier_ids(size)) == expected
        stale = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
        outcome = await store.compare_and_append([stale], None)
        assert not outcome.appended
        assert outcome.head == Head(size - 1, entry_hash(written[-1]))
        assert outcome.frontier == expected and len(expected) == bin(size).count("1")
