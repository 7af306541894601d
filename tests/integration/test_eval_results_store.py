"""Conformance of the evaluation-result series (ResultLog) on both stores: SQLite (tmp file) and
the real Redis (the session's redis-server): append order, limits, duplicate run ids, isolation
between series, bad input, persistence across store instances."""

from __future__ import annotations

import pytest

from proxy.storage import open_store
from proxy.storage.base import LedgerConflict, LedgerStore, ResultLog
from tests.support.ledger import STORE_KINDS, ledger_url, store  # noqa: F401  (fixtures)

both = pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)


def _result(run_id: str, value: float) -> dict:
    return {"run_id": run_id, "generated": f"2026-11-2{run_id[-1]}T00:00:00Z", "summary": {"ssa": value},
            "note": "caf\u00e9 \U0001f600"}


@both
async def test_append_and_list_in_order(store: LedgerStore) -> None:
    assert isinstance(store, ResultLog)
    assert await store.list_results("conversation") == []
    results = [_result(f"run-{i}", i / 10) for i in range(5)]
    for r in results:
        await store.append_result("conversation", r)
    assert await store.list_results("conversation") == results
    assert await store.list_results("conversation", limit=2) == results[-2:]
    assert await store.list_results("conversation", limit=50) == results


@both
async def test_duplicate_run_id_is_refused_and_writes_nothing(store: LedgerStore) -> None:
    await store.append_result("conversation", _result("run-1", 0.5))
    with pytest.raises(LedgerConflict):
        await store.append_result("conversation", _result("run-1", 0.9))
    assert [r["summary"]["ssa"] for r in await store.list_results("conversation")] == [0.5]
    await store.append_result("suite:other", _result("run-1", 0.7))  # another series may reuse it
    assert [r["summary"]["ssa"] for r in await store.list_results("suite:other")] == [0.7]
    assert len(await store.list_results("conversation")) == 1


@both
@pytest.mark.parametrize("series, result", [
    ("bad name with spaces", {"run_id": "r", "generated": "t"}),
    ("", {"run_id": "r", "generated": "t"}),
    ("conversation", {"generated": "t"}),
    ("conversation", {"run_id": "", "generated": "t"}),
    ("conversation", {"run_id": "r"}),
    ("conversation", ["not", "an", "object"]),
])
async def test_bad_input_is_a_value_error(store: LedgerStore, series: str, result: object) -> None:
    with pytest.raises(ValueError):
        await store.append_result(series, result)  # type: ignore[arg-type]
    assert await store.list_results("conversation") == []


@both
@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
async def test_bad_limit(store: LedgerStore, limit: object) -> None:
    with pytest.raises(ValueError):
        await store.list_results("conversation", limit=limit)  # type: ignore[arg-type]


@both
async def test_results_survive_a_new_store_instance(ledger_url: str, store: LedgerStore) -> None:
    await store.append_result("conversation", _result("run-3", 0.3))
    again = open_store(ledger_url)
    try:
        assert await again.list_results("conversation") == [_result("run-3", 0.3)]
    finally:
        await again.close()
