"""Contract tests of the Ledger (proxy/receipts/chain.py) written against surviving mutants (mutation/baseline.md).

Group commit: which requests share one atomic write (``max_batch``, default 64; a request is never
split; a caller that cancelled before its group was taken is left out), the retry bound
(``max_attempts``, default 50, at least 1), one appender per ledger, and turn taking after a lost
race (``contended_s`` = 1.0 s of contended mode, ``turn_timeout_s`` = 0.05 s wait for the token).

Real stores only: SQLite in tmp_path and the session's Redis (tests/support/ledger.py). A rival
writer that moves the head before every compare-and-set is a second Ledger on the same SQLite file,
running in its own thread and event loop (as another process would), driven from the
``signer_source`` hook, which the ledger calls once per attempt. The contended-mode window is
measured on the event loop's clock, shifted forward instead of slept through.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Coroutine, TypeVar

import pytest

from proxy.receipts import GENESIS_PREV_HASH, Head, Ledger, LedgerConflict, Signer, entry_hash, open_store, verify_store
from proxy.storage.base import LedgerStore
from tests.support.ledger import (  # noqa: F401  (fixtures)
    keys,
    ledger_url,
    make_receipt,
    signer,
    store,
)

sqlite_only = pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
redis_only = pytest.mark.parametrize("ledger_url", ["redis"], indirect=True)

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
