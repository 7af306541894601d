"""Conversation results in the ledger's store (longitudinal queries) and as JSONL.

The whole result document of a run is appended to the series :data:`SERIES` of the store's
:class:`~proxy.storage.base.ResultLog` (SQLite or Redis, the ledger URL of config.yaml or
``--ledger``). ``sonate report`` reads the series back for its trends section
(:func:`trend_rows`), and ``--export-jsonl`` writes the stored runs one JSON object a line.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

__all__ = ["SERIES", "TREND_METRICS", "list_runs", "store_run", "to_jsonl", "trend_rows"]

SERIES = "conversation"
#: The summary metrics a trend shows, in order.
TREND_METRICS = ("humanity_entropy", "humanity_spearman", "risk_total", "non_biased_share", "memory",
                 "language_adaptation", "grice", "ssa", "context_adherence", "bestof_confidence", "silhouette")


async def store_run(url: str, result: dict[str, Any]) -> None:
    """Append ``result`` to :data:`SERIES` in the store at ``url``. Raises ValueError (bad URL or
    result), :class:`~proxy.storage.base.LedgerError` (store unreachable, run id stored already)."""
    from proxy.storage import open_store

    store = open_store(url)
    try:
        await store.append_result(SERIES, result)
    finally:
        await store.close()


async def list_runs(url: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The stored runs of :data:`SERIES`, oldest first (the last ``limit``). Raises like :func:`store_run`."""
    from proxy.storage import open_store

    store = open_store(url)
    try:
        return await store.list_results(SERIES, limit=limit)
    finally:
        await store.close()


def to_jsonl(results: Sequence[dict[str, Any]]) -> str:
    """One JSON object a line (UTF-8 text, trailing newline; "" for none)."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in results)


def trend_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stored run, oldest first: ``{run_id, generated, turns, <metric>: value or None}`` over
    :data:`TREND_METRICS` (runs of another format are skipped)."""
    rows = []
    for result in results:
        summary = result.get("summary") if isinstance(result, dict) else None
        if not isinstance(summary, dict):
            continue
        rows.append({"run_id": result.get("run_id"), "generated": result.get("generated"),
                     "turns": summary.get("turns"), **{m: summary.get(m) for m in TREND_METRICS}})
    return rows
