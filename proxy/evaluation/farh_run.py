"""The steps of a FAR-H measurement (``sonate eval hallucination``; options in :mod:`proxy.cli.evaluate`).

Two ways to get the outputs:

- an outputs JSONL: one JSON object per line, ``{"output": str, "question": str?, "id": str?,
  "domain": str?, "ts": str?, "action": str?}``. ``question`` links the output to the oracle;
  ``action`` (the proxy's ``x-sonate-guardrail-action``) ``refuse`` or ``escalate`` marks a
  guardrail notice, not a model output: such lines are skipped (:func:`records_from_rows`).
- a running proxy (:func:`ask_proxy`): the first ``limit`` oracle questions (in file order) are
  sent through :class:`~proxy.evaluation.client.ProxyClient`; the domain of each answer is the
  receipt's ``intent`` (the Compliance classifier).

Then claims are mined, verified and the FAR-H result built (:func:`measure`, format
:data:`proxy.evaluation.hallucination.FARH_RESULT_FORMAT`). Data problems raise
:class:`~proxy.evaluation.data.DataError`; proxy problems
:class:`~proxy.evaluation.client.ProxyError`.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from proxy.evaluation.client import ProxyClient
from proxy.evaluation.data import DataError, read_halueval_qa, read_truthfulqa, read_yaml_or_json
from proxy.evaluation.hallucination import OutputRecord, check_outputs, farh_result
from proxy.evaluation.oracle import Oracle, RegexRule, halueval_entries, regex_rules_from_rows, truthfulqa_entries

#: Oracle sources ``--oracle`` may name.
ORACLES = ("halueval", "truthfulqa")
#: Guardrail actions whose answer is a proxy notice, not a model output.
NOT_MODEL_OUTPUT = {"refuse", "escalate"}


def now() -> str:
    """The current time, RFC 3339 UTC to the second (``2026-11-23T10:41:03Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_oracle(data_dir: Path, names: Sequence[str]) -> Oracle:
    """The oracle of the named sources (a subset of :data:`ORACLES`) read from ``data_dir``.

    Raises DataError for missing or malformed data.
    """
    entries = []
    try:
        if "halueval" in names:
            entries += halueval_entries(read_halueval_qa(data_dir))
        if "truthfulqa" in names:
            entries += truthfulqa_entries(read_truthfulqa(data_dir))
        return Oracle(entries)
    except ValueError as exc:
        raise DataError(str(exc)) from None


def read_regex_rules(path: Path) -> list[RegexRule]:
    """The regex fact checks of a YAML/JSON list of ``{name, applies, expect}``. Raises DataError."""
    document = read_yaml_or_json(path)
    if not isinstance(document, list):
        raise DataError(f"{path}: must be a list of {{name, applies, expect}}")
    try:
        return regex_rules_from_rows(document)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from None


def records_from_rows(rows: list[dict[str, Any]], source: str) -> tuple[list[OutputRecord], int]:
    """Output records of an outputs JSONL (and how many were guardrail notices, skipped).

    Raises DataError naming the record for a missing/non-string ``output`` or bad optional fields.
    """
    records, skipped = [], 0
    for number, row in enumerate(rows, 1):
        where = f"{source}: record {number}"
        if not isinstance(row.get("output"), str):
            raise DataError(f"{where}: field 'output' must be a string")
        for key in ("question", "id", "domain", "ts", "action"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise DataError(f"{where}: field {key!r} must be a string when given")
        if row.get("action") in NOT_MODEL_OUTPUT:
            skipped += 1
            continue
        records.append(OutputRecord(row.get("id") or str(number), row["output"], row.get("question"),
                                    row.get("domain"), row.get("ts")))
    return records, skipped


def ask_proxy(client: ProxyClient, oracle: Oracle, *, limit: int, concurrency: int) -> list[dict[str, Any]]:
    """Send the first ``limit`` oracle questions through the proxy, ``concurrency`` at a time.

    Returns outputs JSONL rows ``{id, question, output, domain, action, receipt_id, ts}`` in
    oracle order. Raises ProxyError (an HTTP error answer stops the run).
    """
    def one(entry) -> dict[str, Any]:
        answer = client.ask(entry.question)
        receipt = client.receipt(answer.receipt_id) if answer.receipt_id else None
        return {"id": entry.id, "question": entry.question, "output": answer.content,
                "domain": receipt.get("intent") if isinstance(receipt, dict) else None,
                "action": answer.action, "receipt_id": answer.receipt_id, "ts": now()}

    entries = list(oracle)[:limit]
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(concurrency) as pool, tqdm(total=len(entries), desc="asking the proxy",
                                                        unit="q", file=sys.stderr) as bar:
        for row in pool.map(one, entries):
            rows.append(row)
            bar.update(1)
    return rows


def model_span_pass(config: Any, claims_model: str, records: list[OutputRecord], *, concurrency: int):
    """Claims of the model-assisted span detection pass: ``(claims by record id, failures)``.

    Raises ValueError when ``claims_model`` is not a ``model_name`` of ``config``.
    """
    from proxy.evaluation.claim_spans import detect_spans

    with tqdm(total=len(records), desc="model span detection", unit="output", file=sys.stderr) as bar:
        found = asyncio.run(detect_spans(config, claims_model, [(r.id, r.output) for r in records],
                                         concurrency=concurrency, progress=bar.update))
    return found.claims, len(found.failures)


def measure(records: list[OutputRecord], oracle: Oracle, *, oracles: Sequence[str], rules: list[RegexRule],
            model_claims: Any, model_assisted: bool, source: str,
            details: bool) -> dict[str, Any]:
    """Check every record's claims and build the FAR-H result (without the caller's counts
    ``outputs_not_model`` and ``model_assisted_failures``, which it adds to ``inputs``)."""
    checked = check_outputs(tqdm(records, desc="checking claims", unit="output", file=sys.stderr), oracle,
                            regex_rules=rules, model_claims=model_claims)
    stamps = sorted(r.ts for r in records if r.ts)
    return farh_result(
        checked, records=len(records), records_with_oracle=sum(1 for r in records if oracle.lookup(r.question)),
        oracles=list(oracles), oracle_questions=len(oracle), regex_rules=len(rules),
        model_assisted=model_assisted, source=source, generated_at=now(),
        window=(stamps[0], stamps[-1]) if stamps else (None, None), details=details)
